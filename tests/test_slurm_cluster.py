"""Compiled Slurm jobs on a real Slurm cluster: Debian's slurm-wlm (slurmctld + 2 slurmd, each
node a network namespace with its own name and address, fake GPUs as GRES; tests/slurm_cluster.py),
submitted with `sbatch` exactly as `trainspec compile -t slurm` wrote them (and followed until they end). A real
torch.distributed (gloo) and a real Lightning run must agree on world, ranks and node ranks,
per process (srun starts every rank) and per node (torchrun / Lightning spawn); a node that
dies mid-job and a job larger than the cluster end with Slurm's message, bounded.

The cluster is installed (apt-get) and started once for the module and stopped by it."""

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

import conftest

from conftest import PROBE_COMMAND, REPO, assert_probed, ts, world_probe
from slurm_cluster import GPU_TYPE, GPUS_PER_NODE, SlurmCluster, missing

conftest.installed("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
conftest.installed("lightning", reason="lightning is a test extra")

pytestmark = pytest.mark.realproc

RESULT = re.compile(r"^ *\d+: TRAINSPEC_RESULT (\{.*\})$", re.M)  # srun --label: the task id first


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(f"no Slurm cluster here: {reason}")
    with SlurmCluster(tmp_path_factory.mktemp("slurm") / "cluster") as running:
        yield running


def job(tmp_path, *, name, code, command, framework="pytorch", nodes=2, procs=GPUS_PER_NODE, launcher="per-process",
        extra=""):
    """A spec for the cluster (CPU torch on fake GPUs: gloo), compiled; the job folder. Per process
    unless said: srun starts every rank, Slurm's own shape (a spec that names no launcher runs
    several processes per node)."""
    distribution = f"distribution: {{backend: gloo, launcher: {launcher}}}"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""version: 1
name: {name}
code: {code}
command: {command}
framework: {framework}
resources: {{nodes: {nodes}, gpus_per_node: {GPUS_PER_NODE}, procs_per_node: {procs}}}
{distribution}
env: {{OMP_NUM_THREADS: 1}}
targets:
  slurm:
    python: {sys.executable}
{extra}""")
    proc = ts("compile", str(spec), "-t", "slurm", "-o", str(tmp_path / "build"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"sbatch {tmp_path}/build/{name}/slurm/job.sbatch" in proc.stdout  # what compile says to run
    return tmp_path / "build" / name / "slurm"


def submit(cluster, folder: Path, cwd: Path, timeout=600):
    """sbatch from cwd, as a user submits, until the job ends; (its exit code, its final state, the
    job's stdout, stderr)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])  # `python` on the nodes
    done = cluster.sbatch(folder / "job.sbatch", cwd, timeout=timeout, path=path)
    assert done.job_id, done.output
    name = folder.parent.name
    out, err = (cwd / f"{name}-{done.job_id}.out", cwd / f"{name}-{done.job_id}.err")
    return done.returncode, done.state, out.read_text(), err.read_text()


def assert_world(code, stdout, stderr, *, script, world=4, per_node=2):
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    found = sorted((json.loads(m) for m in RESULT.findall(stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(world)), stdout[-3000:] + stderr[-3000:]
    for r in found:
        assert (r["script"], r["world_size"], r["allreduce"]) == (script, world, world)  # a real all_reduce
        assert (r["node_rank"], r["local_rank"]) == (r["rank"] // per_node, r["rank"] % per_node)
        assert r["master"] == "n1:6105"  # the first host of SLURM_JOB_NODELIST, the spec's port


def test_ddp_per_process_srun_starts_every_rank(cluster, tmp_path):
    folder = job(tmp_path, name="ddp-slurm", code=REPO / "examples" / "ddp", command="python train.py --steps 3")
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert_world(code, stdout, stderr, script="ddp")
    assert "trainspec: slurm detected; world 4 = 2 node(s) x 2 process(es) [per-process]; master n1:6105" in stderr


def test_a_command_reads_node_rank_and_master_addr_after_the_shim(cluster, tmp_path):
    """`python probe.py $NODE_RANK "$MASTER_ADDR"` (issue 21): it used to stay in job.sbatch's srun
    line, where the batch script's `set -u` shell expanded it before any shim ran
    (`NODE_RANK: unbound variable`). Now each task's shell expands it under the shim."""
    folder = job(tmp_path, name="probe", code=world_probe(tmp_path / "code"), command=PROBE_COMMAND)
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert_probed([json.loads(m) for m in RESULT.findall(stdout)], master="n1")


def test_ddp_per_node_under_torchrun(cluster, tmp_path):
    folder = job(tmp_path, name="ddp-torchrun", code=REPO / "examples" / "ddp", command="python train.py --steps 3",
                 launcher="per-node")
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert_world(code, stdout, stderr, script="ddp")


def test_lightning_per_process_agrees_with_its_own_slurm_environment(cluster, tmp_path):
    folder = job(tmp_path, name="mnist-slurm", code=REPO / "examples" / "mnist", framework="lightning",
                 command=f"python train.py --num_nodes {{{{ nodes }}}} --devices {{{{ procs_per_node }}}} "
                         f"--output {tmp_path}/outputs")
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert_world(code, stdout, stderr, script="mnist")


def test_lightning_per_node_spawns_its_devices(cluster, tmp_path):
    folder = job(tmp_path, name="mnist-spawn", code=REPO / "examples" / "mnist", framework="lightning",
                 launcher="per-node", command=f"python train.py --num_nodes {{{{ nodes }}}} --devices "
                                              f"{{{{ procs_per_node }}}} --output {tmp_path}/outputs")
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert_world(code, stdout, stderr, script="mnist")


def test_gpu_type_runs_on_nodes_of_that_gpu_and_is_refused_for_another(cluster, tmp_path):
    """targets.slurm.gpu_type (issue 28: the sku is true or is not claimed): --gpus-per-node=<type>:<n>
    runs on nodes whose GRES has that type, and a job asking for another is refused at once.
    Before the node-death test, which leaves n2 down for the rest of the module."""
    folder = job(tmp_path, name="typed", code=REPO / "examples" / "ddp", command="python train.py --steps 1",
                 extra=f"    gpu_type: {GPU_TYPE}\n")
    assert f"#SBATCH --gpus-per-node={GPU_TYPE}:{GPUS_PER_NODE}\n" in (folder / "job.sbatch").read_text()
    code, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert_world(code, stdout, stderr, script="ddp")
    other = job(tmp_path, name="other-gpu", code=REPO / "examples" / "ddp", command="python train.py --steps 1",
                extra="    gpu_type: a100\n")
    done = cluster.run(["sbatch", "--wait", str(other / "job.sbatch")], cwd=tmp_path, timeout=120)
    assert done.returncode != 0
    assert "Requested node configuration is not available" in done.stderr, done.stderr


CHECKPOINT = """import os, sys
import torch, torch.distributed as dist
data, ckpt = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
text = open(os.path.join(data, "corpus.txt")).read().strip()
if dist.get_rank() == 0:
    torch.save({"step": 1, "seen": text, "world": dist.get_world_size()}, os.path.join(ckpt, "step-1.pt"))
dist.barrier()
print("TRAINSPEC_READ", dist.get_rank(), text, flush=True)
"""


def test_the_input_is_read_and_the_checkpoint_left_where_the_volumes_say(cluster, tmp_path):
    """Issue 28: the spec names an Azure ML data asset and a checkpoint output (Azure ML's own);
    targets.slurm.volumes places both on the shared storage (a folder standing for /shared). Every
    rank reads the input there; the checkpoint is there after the job, in the folder the script
    made, not in the job folder."""
    shared = tmp_path / "shared"
    (shared / "datasets" / "sft").mkdir(parents=True)
    (shared / "datasets" / "sft" / "corpus.txt").write_text("tokens of the corpus\n")
    code = tmp_path / "ckpt-code"
    code.mkdir()
    (code / "ckpt.py").write_text(CHECKPOINT)
    volumes = (f"    volumes: {{corpus: {{path: {shared}/datasets/sft}}, ckpt: {{path: {shared}/checkpoints/ft}}}}\n"
               "inputs: {corpus: {path: 'azureml:sft@latest'}}\noutputs: {ckpt: {}}")
    folder = job(tmp_path, name="ckpt", code=code, command="python ckpt.py {{ inputs.corpus }} {{ outputs.ckpt }}",
                 extra=volumes)
    code_, _, stdout, stderr = submit(cluster, folder, tmp_path)
    assert code_ == 0, stdout[-3000:] + stderr[-3000:]
    assert sorted(re.findall(r"^ *\d+: TRAINSPEC_READ (\d) tokens of the corpus$", stdout, re.M)) == ["0", "1", "2", "3"]
    import torch

    checkpoint = torch.load(shared / "checkpoints" / "ft" / "step-1.pt")
    assert checkpoint == {"step": 1, "seen": "tokens of the corpus", "world": 4}
    assert not (folder / "outputs").exists()  # nothing in the compiled job folder


STEADY = """import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
print("ready rank", dist.get_rank(), flush=True)
while True:  # all_reduce every 0.2 s until a peer is gone
    dist.all_reduce(torch.ones(1))
    time.sleep(0.2)
"""

NODE_DEATH_BOUND = 120  # s from the kill: SlurmdTimeout (10) + the job's clean-up, far under any default


def test_a_node_that_dies_mid_job_ends_the_job_with_slurms_message(cluster, tmp_path):
    code_dir = tmp_path / "steady"
    code_dir.mkdir()
    (code_dir / "steady.py").write_text(STEADY)
    folder = job(tmp_path, name="steady", code=code_dir, command="python steady.py")
    result = {}
    thread = threading.Thread(target=lambda: result.update(done=submit(cluster, folder, tmp_path, timeout=600)))
    thread.start()
    try:
        deadline = time.monotonic() + 300
        while sum(f.read_text().count("ready rank") for f in tmp_path.glob("steady-*.out")) < 4:
            assert thread.is_alive() and time.monotonic() < deadline, "the job never got every rank running"
            time.sleep(0.2)
        killed = time.monotonic()
        cluster.kill_node(2)  # n2: its slurmd, the step and both of its ranks
        thread.join(NODE_DEATH_BOUND)
        assert not thread.is_alive(), f"the job did not end within {NODE_DEATH_BOUND} s of the node's death"
        assert time.monotonic() - killed < NODE_DEATH_BOUND
    finally:
        if thread.is_alive():  # the assertion above failed: end the job so that the wait returns
            cluster.run(["scancel", "--name", "steady"])
        thread.join(600)
    code, state, stdout, stderr = result["done"]
    assert code != 0
    assert re.search(r"srun: error: .*(n2|task)", stderr) or "NODE FAILURE" in stderr.upper(), stderr[-3000:]
    assert state in ("FAILED", "NODE_FAIL"), state  # ended, not requeued (--no-requeue)


def test_a_job_larger_than_the_cluster_is_refused_at_once(cluster, tmp_path):
    """With EnforcePartLimits=ALL (the cluster's setting, tests/slurm_cluster.py). Slurm's default (NO)
    accepts such a job and keeps it pending with reason PartitionNodeLimit: the README says so."""
    folder = job(tmp_path, name="too-big", code=REPO / "examples" / "ddp", command="python train.py", nodes=3)
    started = time.monotonic()
    done = cluster.run(["sbatch", "--wait", str(folder / "job.sbatch")], cwd=tmp_path, timeout=120)
    assert done.returncode != 0 and time.monotonic() - started < 60
    assert "Batch job submission failed: Node count specification invalid" in done.stderr, done.stderr
