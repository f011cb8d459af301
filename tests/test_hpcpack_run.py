"""A simulated HPC Pack cluster on this machine: one process per node task, each given the
environment an HPC Pack task gets (CCP_JOBID, CCP_TASKID, CCP_NODES=1 <its own host> <cores>)
and the compiled CommandLine run through bash as the node agent runs it, on distinct loopback
hosts (127.0.0.2, 127.0.0.3) so that "the master is another host" is really exercised --
including a task the scheduler starts seconds after the others."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

from conftest import PROBE_COMMAND, REPO, SPECS, assert_probed, loopback_only, world_probe

conftest.installed("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
conftest.installed("lightning", reason="lightning is a test extra")

pytestmark = pytest.mark.realproc

RESULT = re.compile(r"^\[node \d+\] TRAINSPEC_RESULT (\{.*\})$", re.M)


def simulate(spec: Path, workdir: Path, *, procs_per_node=2, start_delays=None, timeout=700):
    code = ("import sys; from trainspec.commands.run import LocalOptions, run_local\n"
            f"options = LocalOptions(target='hpcpack', procs_per_node={procs_per_node}, workdir={str(workdir)!r}, "
            f"timeout=600, start_delays={start_delays or {}!r})\n"
            f"sys.exit(run_local({str(spec)!r}, options))")
    command = loopback_only([sys.executable, "-c", code])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def check_world(proc, script, world=4, per_node=2):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = sorted((json.loads(m) for m in RESULT.findall(proc.stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(world)), proc.stdout[-2000:]
    for r in found:
        assert r["script"] == script and r["world_size"] == world and r["allreduce"] == world
        assert r["node_rank"] == r["rank"] // per_node
    assert {r["master"].split(":")[0] for r in found} == {"127.0.0.2"}  # node 0's host, elected
    port = found[0]["master"].split(":")[1]
    assert f"master 127.0.0.2:{port}" in proc.stdout  # torchrun used the port the shim reported


def test_ddp_all_reduce_with_a_late_task(tmp_path):
    # the example spec, training 3 steps (each a real all_reduce) instead of its 100: a third of the CPU
    text = (SPECS / "hpcpack-ddp.yaml").read_text()
    assert "code: ../examples/ddp\n" in text and "--steps 100\n" in text
    spec = tmp_path / "spec" / "hpcpack-ddp.yaml"
    spec.parent.mkdir()
    spec.write_text(text.replace("code: ../examples/ddp\n", f"code: {REPO}/examples/ddp\n")
                    .replace("--steps 100\n", "--steps 3\n"))
    proc = simulate(spec, tmp_path, start_delays={1: 3})
    check_world(proc, "ddp")
    assert "hpcpack" in proc.stderr + proc.stdout
    # the election happened through the shared folder, keyed by the job id: node 1 acknowledged node 0
    folder = tmp_path / "shared" / ".trainspec" / "4242"
    assert (folder / "master").read_text().split()[0] == "127.0.0.2"
    assert (folder / "ack-1").read_text().split()[0] == (folder / "go").read_text().split()[0]


def test_lightning_fit_when_node_zero_starts_last(tmp_path):
    spec = tmp_path / "lightning.yaml"
    spec.write_text(f"""version: 1
name: hpc-lightning
code: {REPO}/examples/mnist
framework: lightning
command: python train.py --num_nodes {{{{ nodes }}}} --devices {{{{ procs_per_node }}}}
resources: {{nodes: 2, gpus_per_node: 2}}
targets:
  hpcpack: {{shared_dir: /app}}
""")
    proc = simulate(spec, tmp_path / "work", start_delays={0: 3})
    check_world(proc, "mnist")


def test_a_command_reads_the_node_rank_and_master_the_shim_set(tmp_path):
    """`python probe.py $NODE_RANK "$MASTER_ADDR"` per node (issue 21): the task's bash used to
    expand both before the shim, where HPC Pack sets neither, and torchrun's workers got nothing.
    Now they expand under the shim, after node 0's host was elected."""
    spec = tmp_path / "probe.yaml"
    spec.write_text(f"""version: 1
name: hpc-probe
code: {world_probe(tmp_path / "code")}
command: {PROBE_COMMAND}
framework: pytorch
resources: {{nodes: 2, gpus_per_node: 2}}
distribution: {{backend: gloo}}
env: {{OMP_NUM_THREADS: 1}}
targets:
  hpcpack: {{shared_dir: /app}}
""")
    proc = simulate(spec, tmp_path / "work")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = [json.loads(m) for m in RESULT.findall(proc.stdout)]
    assert_probed(found, master="127.0.0.2")
