"""run --local for Slurm: job.sbatch run by bash as the batch step on node 0 would, with a local
`srun` (this module, run as ``python -m trainspec.targets.slurm.local srun``) starting every task
on its simulated node with the variables srun sets.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import List

from trainspec.runtime import shim as contract
from trainspec.targets.slurm.lower import JOB_FILE


_LOCAL_JOB_ID = "4242"


def play_local(job_dir: Path, run) -> int:
    """Run job.sbatch with bash as the batch step on node 0 would, with `srun` standing in for
    Slurm's: it starts every task on its simulated node with the variables srun sets (below)."""
    import os
    import subprocess

    from trainspec.local.machinery import base_env

    hosts = run.hosts
    nodes = run.valid.nodes
    stubs = run.workdir / "slurm-bin"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "srun").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {__name__} srun \"$@\"\n")
    (stubs / "scontrol").write_text("#!/bin/sh\nexit 1\n")  # no controller here: the script's fallback applies
    for stub in ("srun", "scontrol"):
        (stubs / stub).chmod(0o755)
    env = base_env(hosts)
    env.update(PATH=f"{stubs}{os.pathsep}{env['PATH']}", SLURM_JOB_ID=_LOCAL_JOB_ID, SLURM_JOB_NAME=run.valid.name,
               SLURM_SUBMIT_DIR=str(job_dir), SLURM_JOB_NUM_NODES=str(nodes), SLURM_NNODES=str(nodes),
               SLURM_JOB_NODELIST=",".join(hosts.address(n) for n in range(nodes)),
               SIMULATED_NETNS=",".join(hosts.netns(n) or "" for n in range(nodes)),
               SIMULATED_TIMEOUT=str(run.options.timeout),
               SIMULATED_RDZV_TIMEOUT=str(run.options.rendezvous_timeout))
    log = getattr(run.out, "log_path", None)  # the run's log: srun's tasks write to it (machinery.RunOutput)
    if log is not None:
        env.update(SIMULATED_LOG=str(log), SIMULATED_LOG_REMOVED="1" if run.out.removed else "")
    print(f"trainspec: running {run.valid.name} locally as Slurm would: {JOB_FILE} through bash, srun on "
          f"{nodes} simulated node(s); workdir {run.workdir}", file=sys.stderr)
    out = getattr(run.out, "terminal", run.out) or sys.stdout
    sys.stdout.flush()
    done = subprocess.run(["bash", str(job_dir / JOB_FILE)], env=env, cwd=str(job_dir), stdin=subprocess.DEVNULL,
                          stdout=out if hasattr(out, "fileno") else None)
    return done.returncode


def srun(argv: List[str]) -> int:
    """`srun [options] COMMAND...` on the simulated nodes: each task with the variables srun sets
    (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE, the step's
    node count and host list), output prefixed, the first failure stopping all (--kill-on-bad-exit)."""
    import os

    from trainspec.local.machinery import Master, Proc, RunOutput, run_and_report

    per_node = 1
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option.startswith("--ntasks-per-node="):
            per_node = int(option.split("=", 1)[1])
        elif option not in ("--kill-on-bad-exit=1", "--label"):  # each task's output is prefixed anyway
            print(f"trainspec: error: the local srun does not know {option}", file=sys.stderr)
            return 2
    nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
    hosts = os.environ["SLURM_JOB_NODELIST"].split(",")
    namespaces = os.environ.get("SIMULATED_NETNS", "").split(",")
    world = nodes * per_node
    procs = []
    for rank in range(world):
        node, local = divmod(rank, per_node)
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(local), SLURM_NODEID=str(node),
                   SLURM_NTASKS=str(world), SLURM_NTASKS_PER_NODE=str(per_node), SLURM_STEP_NUM_NODES=str(nodes),
                   SLURM_STEP_NUM_TASKS=str(world), SLURM_NODELIST=",".join(hosts), SLURM_STEP_NODELIST=",".join(hosts),
                   SLURMD_NODENAME=hosts[node])
        label = f"rank {rank}" if per_node > 1 else f"node {node}"
        procs.append(Proc(label=label, argv=argv, env=env, cwd=os.getcwd(), netns=namespaces[node] or None))
    port = int(os.environ.get(contract.ENV_MASTER_PORT) or contract.AZUREML_MASTER_PORT)
    master = (Master(hosts[0], port, procs[0].label, float(os.environ["SIMULATED_RDZV_TIMEOUT"]),
                     namespaces[0] or None) if world > 1 else None)
    if not os.environ.get("SIMULATED_LOG"):
        return run_and_report(procs, float(os.environ["SIMULATED_TIMEOUT"]), sys.stdout, master)
    with RunOutput(sys.stdout, Path(os.environ["SIMULATED_LOG"]), removed=bool(os.environ.get("SIMULATED_LOG_REMOVED"))) \
            as output:
        return run_and_report(procs, float(os.environ["SIMULATED_TIMEOUT"]), output, master)


if __name__ == "__main__" and sys.argv[1:2] == ["srun"]:
    sys.exit(srun(sys.argv[2:]))
