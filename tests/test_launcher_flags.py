"""Per node, `accelerate launch` and `deepspeed` start the node's workers and read the world from
their own flags: the shim adds the flags the command lacks and refuses one that disagrees
(issue 11, finding 5). accelerate's result is read back with accelerate's own argument parser
(and real 2 x 2 runs, with and without DeepSpeed, are in tests/test_local_run.py); the deepspeed
launcher itself is checked by argv only: trainspec runs no `deepspeed` command of its own."""

import json
import subprocess
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import trainspec_cmd
from trainspec.compiler import base
from trainspec.runtime.shim import Expectation, ShimError, World
from trainspec.runtime.shim_launch import spawner_command

WORLD = World("azureml-pytorch", "10.0.0.4", 6105, 2, 1, 0, 1, 1, 2)  # node 1 of 2, per-node
PER_NODE = Expectation(nodes=2, procs_per_node=8, launcher="per-node", master_port=None, spec="x.yaml")


def test_accelerate_gets_the_world_as_its_own_parser_reads_it():
    accelerate = pytest.importorskip("accelerate.commands.launch", reason="accelerate is in the test extra")
    command = ["accelerate", "launch", "--multi_gpu", "train.py", "--epochs", "3"]
    out = spawner_command(command, WORLD, PER_NODE)
    args = accelerate.launch_command_parser().parse_args(out[2:])
    assert (args.num_machines, args.machine_rank, args.main_process_ip, args.main_process_port,
            args.num_processes) == (2, 1, "10.0.0.4", 6105, 16)
    assert (args.training_script, args.training_script_args) == ("train.py", ["--epochs", "3"])


def test_deepspeed_runs_without_ssh_with_a_hostfile_of_the_nodes(tmp_path):
    command = ["deepspeed", "train.py", "--deepspeed_config", "ds.json"]
    out = spawner_command(command, WORLD, PER_NODE, tmpdir=str(tmp_path))
    hostfile = out[out.index("--hostfile") + 1]
    assert out == ["deepspeed", "--num_nodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.4",
                   "--master_port", "6105", "--num_gpus", "8", "--no_ssh", "--hostfile", hostfile,
                   "train.py", "--deepspeed_config", "ds.json"]
    assert open(hostfile).read() == "node-0 slots=8\nnode-1 slots=8\n"


def test_flags_the_user_wrote_stay_and_a_wrong_one_fails_fast():
    same = ["accelerate", "launch", "--num_machines=2", "train.py"]
    assert spawner_command(same, WORLD, PER_NODE).count("--num_machines") == 0
    with pytest.raises(ShimError, match=r"accelerate --machine_rank 0, but this node's world says 1"):
        spawner_command(["accelerate", "launch", "--machine_rank", "0", "train.py"], WORLD, PER_NODE)


def test_other_commands_and_other_launchers_are_left_alone():
    assert spawner_command(["python", "train.py"], WORLD, PER_NODE) == ["python", "train.py"]
    per_process = PER_NODE._replace(launcher="per-process")
    assert spawner_command(["accelerate", "launch", "t.py"], WORLD, per_process) == ["accelerate", "launch", "t.py"]


@pytest.mark.parametrize("command, launcher", [
    ("accelerate launch --multi_gpu train.py", "accelerate"), ("python -m accelerate.commands.launch t.py", "accelerate"),
    ("deepspeed train.py --deepspeed", "deepspeed"), ("python3 -m deepspeed.launcher.runner t.py", "deepspeed"),
    ("python train.py", None), ("deepspeedish train.py", None),
])
def test_the_compiler_knows_them(command, launcher):
    assert base.own_spawner(command) == launcher


@pytest.mark.parametrize("target, settings", [("azureml", "azureml: {compute: gpu-cluster}"),
                                              ("hpcpack", "hpcpack: {shared_dir: /app, node_group: LinuxNodes}")])
def test_per_node_compiles_them_as_written_under_the_shim(tmp_path, target, settings):
    (tmp_path / "code").mkdir()
    (tmp_path / "s.yaml").write_text(
        "version: 1\nname: ds\ncode: code\ncommand: deepspeed train.py --deepspeed ds.json\nframework: deepspeed\n"
        "resources: {nodes: 2, sku: Standard_ND96isr_H100_v5}\ndistribution: {launcher: per-node}\n"
        + ("environment: {image: python:3.11}\n" if target == "azureml" else "")
        + f"targets:\n  {settings}\n")
    proc = subprocess.run([*trainspec_cmd(), "plan", "s.yaml", "-t", target, "--format", "json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([*trainspec_cmd(), "compile", "s.yaml", "-t", target, "-o", "out"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = next((tmp_path / "out" / "ds" / target).glob("job.*")).read_text()
    assert "-- deepspeed train.py --deepspeed ds.json" in text and "torchrun" not in text \
        and "torch.distributed.run" not in text


# --- one launcher per job, the same on every target ---------------------------------------------------

TARGET_SETTINGS = {"azureml": "{compute: cpu-cluster}", "hpcpack": "{shared_dir: /app}", "kubernetes": "{}",
                   "ray": "{location: eastus, resource_group: rg}", "slurm": "{}"}


def one_spec(tmp_path, command, resources="{nodes: 1, gpus_per_node: 0, sku: Standard_D4s_v3}", distribution=""):
    (tmp_path / "code").mkdir(parents=True, exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print('step')\n")
    path = tmp_path / "step.yaml"
    path.write_text(f"version: 1\nname: step\ncode: code\ncommand: {command}\nresources: {resources}\n"
                    f"{distribution}environment: {{image: 'python:3.11'}}\ntargets:\n"
                    + "".join(f"  {name}: {value}\n" for name, value in TARGET_SETTINGS.items()))
    return path


def built(path, tmp_path, target):
    from trainspec.registry.build import build

    return build(str(path), tmp_path / "out", [target])


@pytest.mark.parametrize("target", sorted(TARGET_SETTINGS))
@pytest.mark.parametrize("command, found, distribution", [
    # a one-process job runs per-process by default: the platform starts the one process
    ("torchrun --nproc_per_node 4 train.py", "torchrun", ""),
    ("python -u -m torch.distributed.run --nproc_per_node 4 train.py", "python -m torch.distributed.run", ""),
    ("accelerate launch train.py", "accelerate launch", ""),
    # per-process as written, one process on each of two nodes (every target runs that)
    ("python3 -m torch.distributed.launch train.py", "python -m torch.distributed.launch",
     "distribution: {launcher: per-process}\n"),
    ("OMP_NUM_THREADS=1 deepspeed train.py", "deepspeed", "distribution: {launcher: per-process}\n"),
    ("mpirun -np 2 python train.py", "mpirun", "distribution: {launcher: per-process}\n"),
    ("pip install -q x && srun python train.py", "srun", "distribution: {launcher: per-process}\n"),
])
def test_a_launcher_inside_the_per_process_launcher_is_an_error_at_command_on_every_target(
        tmp_path, target, command, found, distribution):
    resources = "{nodes: 2, gpus_per_node: 0, sku: Standard_D4s_v3}" if distribution else None
    path = one_spec(tmp_path, command, *([resources] if resources else []), distribution=distribution)
    outcome = built(path, tmp_path, target)
    assert not outcome.artifacts
    [problem] = [d for d in outcome.diagnostics if d.path == ("command",)]
    assert (problem.line, problem.col, problem.is_error) == (4, 10, True)
    assert problem.message.startswith(f"starts its own launcher ({found}), but ")
    assert f"each would run its own {found}" in problem.message
    assert "write `python train.py ...`" in problem.hint and "distribution.launcher: per-node" in problem.hint


@pytest.mark.parametrize("command", ["python train.py", "python -m pkg.train", "echo torchrun && python train.py",
                                     "python torchrun.py", "srunner train.py"])
def test_a_command_that_starts_no_launcher_is_not_one(command):
    from trainspec.schema.validate import started_launcher

    assert started_launcher(command) is None


# the compiled line every process of a one-process job runs, per target
COMMAND_LINE = {
    "azureml": lambda folder: yaml.safe_load((folder / "job.yml").read_text())["command"],
    "hpcpack": lambda folder: ET.parse(folder / "job.xml").getroot().find(".//{*}Task").get("CommandLine"),
    "kubernetes": lambda folder: list(yaml.safe_load_all((folder / "job.yaml").read_text()))[-1]["spec"]["trainer"][
        "command"][-1],
    "ray": lambda folder: json.loads((folder / "trainspec_ray_job.json").read_text())["command"],
    "slurm": lambda folder: next(line for line in (folder / "job.sbatch").read_text().splitlines()
                                 if line.startswith("srun ")),
}


@pytest.mark.parametrize("target", sorted(TARGET_SETTINGS))
def test_a_one_process_job_is_never_wrapped_in_a_launcher(tmp_path, target):
    """`python train.py` in `python:3.11` (no torch): the one process runs the command under the
    shim alone on every target, told it is per-process; Kubernetes used to wrap it in torchrun."""
    from trainspec.compiler.write import write_all

    outcome = built(one_spec(tmp_path, "python train.py"), tmp_path, target)
    assert outcome.artifacts, [d.render() for d in outcome.diagnostics]
    write_all(tmp_path / "out", outcome.artifacts)
    line = COMMAND_LINE[target](tmp_path / "out" / "step" / target)
    assert line.endswith("-- python train.py") and "torchrun" not in line and "torch.distributed" not in line, line
    assert outcome.valid.launcher == "per-process"


def test_the_default_launcher_is_the_spec_s_not_the_target_s(tmp_path):
    from trainspec.registry import build

    one = one_spec(tmp_path, "python train.py")
    many = one_spec(tmp_path / "many", "python train.py", "{nodes: 2, gpus_per_node: 2, sku: Standard_NC48ads_A100_v4}")
    for path, expected in ((one, "per-process"), (many, "per-node")):
        outcome = build.build(str(path), tmp_path / "out", list(TARGET_SETTINGS), lower=False)
        assert {name: build.launcher(outcome.valid, name) for name in TARGET_SETTINGS} == \
            dict.fromkeys(TARGET_SETTINGS, expected)


# ---------------------------------------------------------------- issue 41: one world across the nodes


def _accelerate_decides(argv: list[str]):
    """accelerate's own launch decision for ``accelerate launch ARGV``, in-process: its parser, its
    validation (config file defaults) and the DeepSpeed command it would run (None: torchrun)."""
    launch = pytest.importorskip("accelerate.commands.launch", reason="accelerate is in the test extra")
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args, _, _ = launch._validate_launch_command(launch.launch_command_parser().parse_args(argv))
    args.deepspeed_fields_from_accelerate_config = ""  # as launch_command sets it
    cmd, _ = prepare_deepspeed_cmd_env(args)
    return args, cmd


def test_accelerate_deepspeed_joins_the_nodes_through_torchrun():
    """Bug: per node, accelerate + DeepSpeed on 2 machines ran `deepspeed --hostfile None` (pdsh,
    its default), which found no hostfile and trained on its own node: 2 worlds of 8, not one of 16."""
    before, _ = _accelerate_decides(["--use_deepspeed", "--num_machines", "2", "--machine_rank", "1",
                                     "--num_processes", "16", "--main_process_ip", "10.0.0.4", "train.py"])
    assert before.deepspeed_multinode_launcher == "pdsh"  # what accelerate does without the shim's flag
    command = ["accelerate", "launch", "--use_deepspeed", "--zero_stage", "2", "train.py"]
    out = spawner_command(command, WORLD, PER_NODE)
    args, deepspeed = _accelerate_decides(out[2:])
    assert deepspeed is None  # no pdsh/ssh command: accelerate runs torchrun itself
    assert (args.deepspeed_multinode_launcher, args.nnodes, args.node_rank, args.nproc_per_node,
            args.rdzv_endpoint) == ("standard", "2", 1, "8", "10.0.0.4:6105")


def test_a_pdsh_deepspeed_launcher_fails_fast_and_one_node_needs_none():
    with pytest.raises(ShimError, match=r"--deepspeed_multinode_launcher pdsh: every node runs its own"):
        spawner_command(["accelerate", "launch", "--deepspeed_multinode_launcher=pdsh", "t.py"], WORLD, PER_NODE)
    kept = ["accelerate", "launch", "--deepspeed_multinode_launcher", "standard", "t.py"]
    assert spawner_command(kept, WORLD, PER_NODE).count("--deepspeed_multinode_launcher") == 1
    one_node = WORLD._replace(nodes=1, node_rank=0, world_size=1, rank=0)
    assert "--deepspeed_multinode_launcher" not in spawner_command(["accelerate", "launch", "t.py"], one_node,
                                                                   PER_NODE._replace(nodes=1))


def test_a_shell_line_of_accelerate_gets_what_needs_none_of_its_expansions():
    """A command that expands $MASTER_ADDR runs as `bash -c LINE`: the shim cannot know what the
    line's flags will say, but adds the DeepSpeed launcher and, under c10d, the --machine_rank that
    accelerate's multi-machine path turns into an int (it fails on None)."""
    line = "accelerate launch --rdzv_backend c10d --main_process_ip $MASTER_ADDR --num_machines 2 train.py --x 'a b'"
    out = spawner_command(["bash", "-c", line], WORLD, PER_NODE)
    assert out == ["bash", "-c", "accelerate launch --deepspeed_multinode_launcher standard --machine_rank 1"
                   + line[len("accelerate launch"):]]
    static = "python -m accelerate.commands.launch --machine_rank $NODE_RANK --num_machines 2 t.py"
    assert spawner_command(["bash", "-c", static], WORLD, PER_NODE)[2] == (
        "python -m accelerate.commands.launch --deepspeed_multinode_launcher standard" + static[36:])
    assert spawner_command(["bash", "-c", "echo $X"], WORLD, PER_NODE) == ["bash", "-c", "echo $X"]
