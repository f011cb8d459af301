"""`trainspec run --local` with real processes: 2 simulated nodes x 2 CPU processes, gloo,
started exactly as Azure ML would start them, running the unmodified example scripts.

Each rank prints `TRAINSPEC_RESULT {json}` after a real all_reduce; the tests check that
every rank agrees on the world. Runs inside a loopback-only network namespace when it can
(root + unshare), so rendezvous servers are reachable from nowhere else.
"""

import json
import os
import re
import subprocess

import pytest

import conftest

from conftest import (PROBE_COMMAND, REPO, SPECS, assert_probed, in_background, kill_processes_with, loopback_only,
                      path_env, processes_with, sigterm_when, trainspec_cmd, world_probe)

conftest.installed("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
conftest.installed("lightning", reason="lightning is a test extra")

pytestmark = pytest.mark.realproc

RESULT = re.compile(r"^\[(?:rank|node) \d+\] TRAINSPEC_RESULT (\{.*\})$", re.M)

# The runner's own account of a failure: how long the other processes took to end after it,
# measured by the runner from the failure on -- what it promises (grace, then SIGTERM, then
# SIGKILL after KILL_AFTER), whatever the machine's load did to the start-up before it.
ENDED_WITHIN = re.compile(r"the other \d+ process(?:es)? ended within ([\d.]+) s")
SLACK = 5.0  # for the runner's own threads to see the exits, on a loaded machine
# The example specs' own command trains 100 steps; 3 make the same world agree through real
# all_reduces (every step is one) at half the CPU (`run --local` of ddp-torchrun.yaml, 2 x 2
# processes on 2 cores: 31-34 s of CPU and 24-27 s with 100 steps, 17-18 s and 12-13 s with 3)
STEPS = {"--steps 100": "--steps 3"}


def ended_within(errors: str) -> float:
    found = ENDED_WITHIN.search(errors)
    assert found, errors[-3000:]
    return float(found.group(1))

def run(args, workdir, timeout=600):
    command = loopback_only([*trainspec_cmd(), "run", *args, "--local", "--workdir", str(workdir)])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=path_env(), cwd=REPO)


def results(proc):
    return [json.loads(m) for m in RESULT.findall(proc.stdout)]


def assert_world(proc, *, script, world=4, per_node=2):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = sorted(results(proc), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(world)), proc.stdout[-3000:]
    for r in found:
        assert r["script"] == script
        assert r["world_size"] == world
        assert r["allreduce"] == world  # a real all_reduce over every rank
        assert r["node_rank"] == r["rank"] // per_node
        assert r["local_rank"] == r["rank"] % per_node
    assert len({r["master"] for r in found}) == 1
    assert found[0]["master"].startswith("127.0.0.2:")  # node 0's simulated address, not the default
    assert "trainspec: all" in proc.stderr


@pytest.mark.parametrize("spec, launcher, platform", [
    ("mnist-lightning.yaml", None, "azureml-pytorch"),     # Azure ML pytorch distribution, per-process
    ("mnist-lightning-mpi.yaml", None, "azureml-mpi"),     # Open MPI variables only
    ("mnist-lightning.yaml", "per-node", "azureml-pytorch"),  # one process per node, Lightning spawns
], ids=["pytorch-vars", "mpi-vars", "per-node-lightning-spawn"])
def test_lightning_fit_agrees_on_the_world(tmp_path, spec, launcher, platform):
    args = [str(SPECS / spec), "--procs-per-node", "2"] + (["--launcher", launcher] if launcher else [])
    proc = run(args, tmp_path)
    assert_world(proc, script="mnist")
    assert re.search(rf"trainspec: {platform}\S* detected; world 4 = 2 node\(s\) x 2", proc.stderr + proc.stdout)


@pytest.mark.parametrize("launcher", ["per-process", "mpi", "per-node"])
def test_torch_distributed_all_reduce(tmp_path, launcher):
    spec = _spec_with(tmp_path, "ddp-torchrun.yaml")
    proc = run([str(spec), "--procs-per-node", "2", "--launcher", launcher], tmp_path / "work")
    assert_world(proc, script="ddp")


@pytest.mark.parametrize("spec, launcher, script", [
    ("slurm-ddp.yaml", None, "ddp"),  # srun starts every rank: the shim's Slurm detector reads them
    ("slurm-ddp.yaml", "per-node", "ddp"),  # one task per node running torchrun
    ("mnist-lightning.yaml", None, "mnist"),  # Lightning's own SLURMEnvironment agrees with the shim
    ("mnist-lightning.yaml", "per-node", "mnist"),  # Lightning spawns: the shim hides SLURM_NTASKS from it
], ids=["ddp-srun", "ddp-torchrun", "lightning-srun", "lightning-spawn"])
def test_slurm_jobs_play_without_slurm(tmp_path, spec, launcher, script):
    """run --local -t slurm: the compiled job.sbatch through bash, with an srun that starts every task
    on its simulated node with the variables srun sets (slurm.md), the rest of the script as written."""
    (tmp_path / "data").mkdir()  # a path on the nodes instead of the Azure ML data asset (synthetic data)
    # and a folder on the nodes for the checkpoints, which Slurm would otherwise write into the job folder
    spec = _spec_with(tmp_path, spec, **({'mnist: {path: "azureml:mnist@latest", mode: ro_mount}':
                                          f"mnist: {{path: {tmp_path / 'data'}}}",
                                          "checkpoints: {mode: rw_mount}": f"checkpoints: {{path: {tmp_path / 'ckpt'}}}"}
                                         if script == "mnist" else {}))
    args = [str(spec), "-t", "slurm", "--procs-per-node", "2"] + (["--launcher", launcher] if launcher else [])
    proc = run(args, tmp_path / "work")
    assert_world(proc, script=script)
    assert "trainspec: slurm detected; world 4 = 2 node(s) x 2 process(es)" in proc.stderr + proc.stdout


@pytest.mark.parametrize("target, launcher", [("slurm", "per-process"), ("azureml", "mpi")])
def test_a_command_reads_the_world_the_shim_set(tmp_path, target, launcher):
    """`python probe.py $NODE_RANK "$MASTER_ADDR"` expands after the shim set them (issue 21): on
    Slurm the batch script's `set -u` shell used to expand it before srun (`NODE_RANK: unbound
    variable`); under Azure ML's MPI distribution, which sets neither, it expanded to nothing."""
    spec = tmp_path / "probe.yaml"
    spec.write_text(f"""version: 1
name: probe
code: {world_probe(tmp_path / "code")}
command: {PROBE_COMMAND}
framework: pytorch
resources: {{nodes: 2, gpus_per_node: 2}}
distribution: {{backend: gloo, launcher: {launcher}}}
environment: {{image: pytorch/pytorch:latest}}
env: {{OMP_NUM_THREADS: 1}}
targets:
  {target}: {{}}
""")
    proc = run([str(spec), "-t", target], tmp_path / "work")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_probed(results(proc), master="127.0.0.2")


def test_lightning_under_per_node_torchrun(tmp_path):
    proc = run([str(REPO / "tests" / "specs" / "lightning-torchrun.yaml")], tmp_path)
    assert_world(proc, script="mnist")


@pytest.mark.parametrize("spec, target, command", [
    ("ddp-torchrun.yaml", "azureml", "python -X faulthandler -u train.py"),
    ("hpcpack-ddp.yaml", "hpcpack", "python -X faulthandler -u train.py"),
    ("ddp-torchrun.yaml", "azureml", "env PYTHONFAULTHANDLER=1 python -u train.py"),
], ids=["azureml", "hpcpack", "not-python"])
def test_per_node_torchrun_keeps_the_interpreters_flags(tmp_path, spec, target, command):
    """`python -X faulthandler -u train.py` per node: torchrun --no-python runs it as written in
    every worker (torchrun's `train.py` form dropped -u and refused -X). A program that is not
    Python (`env ...` here, a console script such as `fast-llm train` in a real job) runs the same
    way (issue 41: it was refused for not starting with `python`)."""
    spec = _spec_with(tmp_path, spec, **{"command: python train.py": f"command: {command}"})
    proc = run([str(spec), "-t", target, "--procs-per-node", "2"], tmp_path / "work")
    assert_world(proc, script="ddp")
    assert [r["faulthandler"] for r in results(proc)] == [True] * 4


ACCELERATE_SCRIPT = """\
import json, os, sys
import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
total = accelerator.reduce(torch.ones(1), "sum")
sys.stdout.write("TRAINSPEC_RESULT " + json.dumps({
    "script": "accelerate", "rank": accelerator.process_index, "world_size": accelerator.num_processes,
    "local_rank": accelerator.local_process_index, "node_rank": int(os.environ["GROUP_RANK"]),
    "allreduce": int(total.item()), "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]}) + "\\n")
accelerator.wait_for_everyone()  # as a real script ends: no rank leaves while another still talks to it
accelerator.end_training()  # destroys the process group
# torch 2.13 + gloo abort a few percent of processes with SIGABRT during interpreter teardown after a
# clean destroy (examples/ddp/train.py measured it): the work is done and flushed, leave without it
sys.stdout.flush()
os._exit(0)
"""


DEEPSPEED_SCRIPT = """\
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
sys.stdout.write("TRAINSPEC_RESULT " + json.dumps({
    "script": "deepspeed", "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
    "local_rank": int(os.environ["LOCAL_RANK"]), "node_rank": int(os.environ["GROUP_RANK"]),
    "deepspeed": os.environ.get("ACCELERATE_USE_DEEPSPEED"), "allreduce": int(total.item()),
    "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]}) + "\\n")
sys.stdout.flush()
dist.destroy_process_group()
os._exit(0)  # torch 2.13 + gloo may abort in interpreter teardown (see ACCELERATE_SCRIPT)
"""


@pytest.mark.parametrize("target, deepspeed", [("azureml", False), ("hpcpack", False), ("azureml", True)],
                         ids=["azureml", "hpcpack", "azureml-deepspeed"])
def test_accelerate_launch_per_node_gets_the_world_from_the_shim(tmp_path, target, deepspeed):
    """`accelerate launch script.py` per node, with no world flags written: the shim adds
    --num_machines/--machine_rank/--main_process_ip/--main_process_port/--num_processes, and
    accelerate's own launcher starts each node's workers (2 nodes x 2 processes, gloo).

    With DeepSpeed (issue 41): `accelerate launch --use_deepspeed` on 2 nodes ran DeepSpeed's pdsh
    launcher with `--hostfile None`, which found no hostfile and ran on localhost: each node a world
    of 2 (ranks 0..1 twice, and a .deepspeed_env written into the code folder). The shim's
    `--deepspeed_multinode_launcher standard` makes accelerate run torchrun across the nodes: one
    world of 4, RANK/WORLD_SIZE as accelerate's DeepSpeed launcher exports them."""
    pytest.importorskip("accelerate", reason="accelerate is in the test extra")
    if deepspeed:
        pytest.importorskip("deepspeed", reason="deepspeed is in the test extra")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(DEEPSPEED_SCRIPT if deepspeed else ACCELERATE_SCRIPT)
    settings = ("azureml: {compute: cpu-cluster}" if target == "azureml"
                else "hpcpack: {shared_dir: /shared, node_group: LinuxNodes}")
    flags = "--use_deepspeed --zero_stage 2" if deepspeed else "--multi_gpu"
    spec = tmp_path / "accelerate.yaml"
    spec.write_text(f"""version: 1
name: accel
code: {code}
command: accelerate launch {flags} --mixed_precision no --dynamo_backend no train.py
resources: {{nodes: 2, gpus_per_node: 0, procs_per_node: 2}}
distribution: {{launcher: per-node}}
environment: {{image: python:3.11}}
env: {{OMP_NUM_THREADS: 1}}
targets:
  {settings}
""")
    proc = run([str(spec), "-t", target], tmp_path / "work")
    assert_world(proc, script="deepspeed" if deepspeed else "accelerate")
    if deepspeed:
        assert {r["deepspeed"] for r in results(proc)} == {"true"}  # accelerate's DeepSpeed launcher ran them
        assert list(tmp_path.rglob(".deepspeed_env")) == []  # no pdsh environment file


LAST_NODE_SCRIPT = """\
import fcntl, json, os, signal, sys
import torch
import torch.distributed as dist

node = int(os.environ["GROUP_RANK"])
lock = open("order.lock", "a")
if node == 0:
    fcntl.flock(lock, fcntl.LOCK_SH)  # held until this worker has exited
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
sys.stdout.write("TRAINSPEC_RESULT " + json.dumps({
    "script": "last-node", "rank": dist.get_rank(), "world_size": dist.get_world_size(),
    "local_rank": int(os.environ["LOCAL_RANK"]), "node_rank": node, "allreduce": int(total.item()),
    "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]}) + "\\n")
sys.stdout.flush()
dist.destroy_process_group()
if node != 0:
    # node 0's workers have all exited (bounded): its agent is at the exit barrier first, and the
    # barrier's last member is on node 1 -- the order in which torchrun's shutdown messages come
    signal.alarm(120)
    fcntl.flock(lock, fcntl.LOCK_EX)
os._exit(0)  # torch 2.13 + gloo may abort in interpreter teardown (see ACCELERATE_SCRIPT)
"""


def test_a_clean_per_node_torchrun_run_keeps_shutdown_traces_in_its_log(tmp_path):
    """Bug: a per-node torchrun run that succeeded printed ~35 lines per node of torchrun's shutdown
    stack traces before "all 2 processes exited 0": the exit barrier's last agent found node 0's
    store gone (c10d's warning with a C++ stack, "Error waiting on exit barrier" with a Python
    one). They are in the run's log (WORKDIR/run.log), which has every line; the terminal has none.
    Whether torchrun prints them at all is a race in torch (node 0 leaving before the last agent's
    final store read): when it does, the report says how many lines the log holds.
    Deterministically, with torchrun's recorded output: tests/test_runtime_procs.py."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(LAST_NODE_SCRIPT)
    spec = tmp_path / "last.yaml"
    spec.write_text(f"""version: 1
name: last-node
code: {code}
command: python train.py
resources: {{nodes: 2, gpus_per_node: 0, procs_per_node: 2}}
distribution: {{launcher: per-node}}
environment: {{image: python:3.11}}
env: {{OMP_NUM_THREADS: 1}}
targets:
  azureml: {{compute: cpu-cluster}}
""")
    proc = run([str(spec)], tmp_path / "work")
    assert_world(proc, script="last-node")
    assert "trainspec: all 2 processes exited 0" in proc.stderr, proc.stderr[-3000:]
    for noise in ("Traceback", "exit barrier", "frame #", "TCPStore.cpp", "SignalException", "death signal"):
        assert noise not in proc.stdout, proc.stdout[-3000:]
    log = (tmp_path / "work" / "run.log").read_text()
    assert sorted(RESULT.findall(log)) == sorted(RESULT.findall(proc.stdout)) and len(RESULT.findall(log)) == 4
    if "Error waiting on exit barrier" in log:
        held = len(log.splitlines()) - len(proc.stdout.splitlines())  # stdout: the processes' lines only
        assert held > 0 and f"trainspec: {held} lines of torchrun's shutdown messages after the work was done" \
            in proc.stderr and f"{tmp_path / 'work' / 'run.log'}" in proc.stderr, proc.stderr[-3000:]


def _spec_with(tmp_path, base: str, **replace):
    """An example spec in tmp_path with its folders absolute, each of ``replace`` done, then 3 steps
    instead of 100 unless ``replace`` said otherwise."""
    text = (SPECS / base).read_text()
    for old, new in {**replace, **{k: v for k, v in STEPS.items() if k not in replace}}.items():
        assert old in text or old in STEPS, old
        text = text.replace(old, new)
    text = text.replace("code: ../examples/", f"code: {REPO}/examples/")
    text = re.sub(r"conda_file: \.\./examples/", f"conda_file: {REPO}/examples/", text)
    spec = tmp_path / base
    spec.write_text(text)
    return spec


def test_a_crashing_rank_ends_the_run_with_its_code_and_output(tmp_path):
    spec = _spec_with(tmp_path, "ddp-torchrun.yaml", **{"--steps 100": "--steps 3 --fail-rank 3"})
    proc = run([str(spec), "--procs-per-node", "2", "--launcher", "per-process"], tmp_path / "work")
    assert proc.returncode == 7, proc.stderr
    assert "rank 3 exited with code 7" in proc.stderr
    assert "  | rank 3 failing on purpose" in proc.stderr  # its last lines are shown
    from trainspec.runtime.procs import KILL_AFTER
    assert ended_within(proc.stderr) < 10.0 + KILL_AFTER + SLACK  # run --local's grace is 10 s
    assert "Traceback (most recent call last)" not in proc.stderr.split("Its last lines:")[0]


HANG = """\
import os, time
if os.environ["RANK"] == "0":  # first thing, before torch is imported: printed at once, however busy the machine
    print("rank 0 hanging on purpose", flush=True)
    time.sleep(3600)
from datetime import timedelta
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=600))
print("TRAINSPEC_RESULT {}", flush=True)
"""
RENDEZVOUS_TIMEOUT = 15  # rank 0 prints within ~0.2 s of its start even on a loaded 2-core machine


def test_a_master_that_never_opens_ends_the_run_with_a_clear_message(tmp_path):
    """Rank 0 hangs before init_process_group: the others would wait in the rendezvous for torch's
    timeout (here 600 s; torch's default 30 min). With --rendezvous-timeout the run stops once that
    has passed (+ the SIGTERM->SIGKILL grace), naming the address and who never opened it. Rank 0
    says it hangs before it imports anything heavy, so its line is there long before the bound."""
    from trainspec.runtime.procs import KILL_AFTER

    code = tmp_path / "code"
    code.mkdir()
    (code / "hang.py").write_text(HANG)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"version: 1\nname: hang\ncode: {code}\ncommand: python hang.py\n"
                    "resources: {nodes: 2, gpus_per_node: 2}\nenvironment: {image: pytorch}\n")
    proc = run([str(spec), "--procs-per-node", "2", "--launcher", "per-process",
                "--rendezvous-timeout", str(RENDEZVOUS_TIMEOUT)], tmp_path / "work")
    assert proc.returncode == 124, proc.stderr
    assert "nothing listened on the master address 127.0.0.2:" in proc.stderr
    assert f"within {RENDEZVOUS_TIMEOUT} s: rank 0 never opened the rendezvous" in proc.stderr
    assert "  | rank 0 hanging on purpose" in proc.stderr  # its last lines
    assert "TRAINSPEC_RESULT" not in proc.stdout
    # the runner's own clock: the bound, then SIGTERM and at most KILL_AFTER more
    stopped = float(re.search(r"every process was stopped after ([\d.]+) s", proc.stderr).group(1))
    assert RENDEZVOUS_TIMEOUT <= stopped < RENDEZVOUS_TIMEOUT + KILL_AFTER + SLACK, stopped
    assert processes_with(cmdline=str(tmp_path)) == []


def test_a_world_that_disagrees_with_the_spec_fails_fast(tmp_path):
    """The compiled job says 2 nodes; the platform starts 3 (say `az ml job create --set
    resources.instance_count=3`). Every process must exit at once naming both numbers."""
    from trainspec.targets.azureml.local import play_job

    out = tmp_path / "build"
    subprocess.run([*trainspec_cmd(), "compile", str(SPECS / "ddp-torchrun.yaml"), "-o", str(out)], check=True,
                   capture_output=True)
    job = out / "ddp-torchrun" / "azureml" / "job.yml"
    job.write_text(job.read_text().replace("instance_count: 2", "instance_count: 3"))
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:
        code = play_job(job, REPO / "examples" / "ddp", tmp_path / "work", timeout=600, out=fh)
    text = log.read_text()
    assert code == 3  # the shim's exit, not the run's timeout (124)
    assert "3" in text and "resources.nodes (2)" in text, text
    # fast: every process stopped in the shim, before train.py (and torch) ever started
    assert not re.search(r"^\[rank \d\] (?!trainspec: )", text, re.M), text


# ---------------------------------------------------------------- faults in the middle of a run


def test_killing_one_rank_mid_run_stops_every_rank_and_names_the_dead_one(tmp_path):
    """SIGKILL rank 2 of 2x2 while all four train (DDP, gloo): the run ends with 137 (128+9), says
    'rank 2 exited with code 137 (SIGKILL)' and that the other three were stopped, and every
    process is gone within the runner's promise, measured from the kill: GRACE seconds for the
    others to fail by themselves, then SIGTERM, then SIGKILL after KILL_AFTER, + 5 s of slack."""
    import signal
    import uuid

    from trainspec.runtime.procs import KILL_AFTER

    grace = 10.0  # run_all's default, used by run --local
    marker = uuid.uuid4().hex
    spec = _spec_with(tmp_path, "ddp-torchrun.yaml", **{"--steps 100": "--steps 10000000"})
    command = loopback_only([*trainspec_cmd(), "run", str(spec), "--procs-per-node", "2", "--launcher", "per-process",
                             "--local", "--workdir", str(tmp_path / "work"),
                             "--timeout", "600"])  # ends even if step 40 never comes
    with in_background(command, path_env(KILLTEST_MARKER=marker)) as runner:
        for line in runner.stdout:  # rank 0 prints every 20 steps: at step 40 all four are in the loop
            if re.match(r"\[rank 0\] step [4-9]\d+ ", line):
                break
        else:
            pytest.fail("the run ended before training: " + runner.stderr.read()[-3000:])
        victims = processes_with(f"KILLTEST_MARKER={marker}", "RANK=2", cmdline="train.py")
        assert len(victims) == 1, victims
        os.kill(victims[0], signal.SIGKILL)
        try:
            rest, errors = runner.communicate(timeout=grace + KILL_AFTER + 120)
        finally:
            kill_processes_with(f"KILLTEST_MARKER={marker}")  # ranks have sessions of their own
    assert runner.returncode == 137, errors[-3000:]
    assert "rank 2 exited with code 137 (SIGKILL)" in errors, errors[-3000:]
    # ... and says what became of the others: each either failed by itself or was stopped
    report = re.search(r"the run was stopped; the other 3 processes ended within [\d.]+ s: (.*)\. Its last lines",
                       errors)
    assert report, errors[-3000:]
    for rank in (0, 1, 3):
        assert re.search(rf"\brank {rank}\b", report.group(1)), report.group(1)
    assert "TRAINSPEC_RESULT" not in rest  # nobody finished
    assert ended_within(errors) < grace + KILL_AFTER + SLACK
    assert processes_with(f"KILLTEST_MARKER={marker}") == []


@pytest.mark.parametrize("told, wrong, field", [
    ({"WORLD_SIZE": "6"}, "started 6 processes (WORLD_SIZE=6)", "expects 4 = resources.nodes (2) x resources.procs_per_node (2)"),
    ({"LOCAL_WORLD_SIZE": "3"}, "processes per node 3", "resources.procs_per_node (2)"),
], ids=["world-size", "procs-per-node"])
def test_one_node_reporting_a_different_world_fails_at_once(tmp_path, capsys, told, wrong, field):
    """Node 1's processes are told another world (a world of 6, as if their agent thought 3 nodes;
    or 3 processes per node); node 0's the spec's 2 x 2. Both of node 1's ranks exit 3 at once
    naming their number and the spec's field; node 0's, waiting in the rendezvous for peers that
    never come, are stopped after the grace: every process has ended within grace + KILL_AFTER of
    the first failure (the runner's own measure), and nothing is left running."""
    import uuid
    from dataclasses import replace

    from ruamel.yaml import YAML

    from trainspec.targets.azureml.local import _data_paths, _substitute, platform_processes
    from trainspec.local.machinery import base_env, run_and_report
    from trainspec.local.netns import Loopback
    from trainspec.runtime.procs import KILL_AFTER

    grace = 10.0
    marker = f"WORLDTEST_MARKER={uuid.uuid4().hex}"
    out = tmp_path / "build"
    spec = _spec_with(tmp_path, "ddp-torchrun.yaml")
    subprocess.run([*trainspec_cmd(), "compile", str(spec), "-o", str(out), "--set", "distribution.launcher=per-process",
                    "--set", "resources.procs_per_node=2"], check=True, capture_output=True)
    job_file = out / "ddp-torchrun" / "azureml" / "job.yml"
    job = YAML(typ="safe", pure=True).load(job_file.read_text())
    command = _substitute(job["command"], _data_paths(job, job_file.parent, tmp_path / "work", {}))
    procs = platform_processes(job, command, cwd=str(REPO / "examples" / "ddp"), base_env=base_env(Loopback()))
    assert [p.env["NODE_RANK"] for p in procs] == ["0", "0", "1", "1"]
    name, value = marker.split("=")
    procs = [replace(p, env={**p.env, name: value, **(told if p.env["NODE_RANK"] == "1" else {})}) for p in procs]
    log = tmp_path / "log.txt"
    try:
        with open(log, "w") as fh:
            code = run_and_report(procs, 600, fh)
    finally:
        kill_processes_with(marker)
    text, errors = log.read_text(), capsys.readouterr().err
    assert code == 3, errors
    for rank in (2, 3):  # each of node 1's processes, with both numbers and the spec's field
        line = re.search(rf"^\[rank {rank}\] trainspec: error: (.*)$", text, re.M)
        assert line and wrong in line.group(1) and field in line.group(1), text
    assert not re.search(r"^\[rank [01]\] trainspec: error", text, re.M), text  # node 0 agrees with the spec
    assert re.search(r"rank [23] exited with code 3 after [\d.]+ s; the run was stopped; the other 3 processes "
                     r"ended within [\d.]+ s: rank 0 and rank 1 were stopped by SIGTERM; rank [23] exited by "
                     r"itself \(code 3\)", errors), errors
    assert ended_within(errors) < grace + KILL_AFTER + SLACK
    assert processes_with(marker) == []


def test_sigterm_to_the_runner_stops_every_process(tmp_path):
    """`kill PID` of `trainspec run --local` (CI cancelling a job) while every rank is running:
    exit 143 and nothing left (Python's default would die at once and leave the ranks, which have
    process groups of their own, running)."""
    import uuid

    from trainspec.runtime.procs import KILL_AFTER

    marker = uuid.uuid4().hex
    code = tmp_path / "code"
    code.mkdir()
    (code / "wait.py").write_text("import os, time\nprint('rank', os.environ['RANK'], 'ready', flush=True)\n"
                                  "time.sleep(600)\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"version: 1\nname: sigterm\ncode: {code}\ncommand: python wait.py\n"
                    "resources: {nodes: 2, gpus_per_node: 2}\nenvironment: {image: pytorch}\n"
                    # every rank a process of the runner's own, each line prefixed with its rank
                    # (two processes a node are per-node by default: torchrun would start them)
                    "distribution: {launcher: per-process}\n"
                    f"env: {{MARKER: '{marker}'}}\n")
    command = [*trainspec_cmd(), "run", str(spec), "--local", "--workdir", str(tmp_path / "work"), "--timeout", "600"]
    ready = set()

    def all_ready(line: str) -> bool:
        found = re.match(r"\[rank (\d)\] rank \d ready", line)
        ready.update([found.group(1)] if found else [])
        return len(ready) == 4

    returncode, errors, left = sigterm_when(command, path_env(), all_ready, f"MARKER={marker}",
                                            timeout=KILL_AFTER + 60)
    assert returncode == 143, errors[-3000:]
    assert "terminated (SIGTERM); every process was stopped" in errors
    assert left == []
