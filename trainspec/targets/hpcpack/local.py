"""run --local for HPC Pack: the compiled job.xml played the way the Linux node agent would,
one task per simulated node, with the CCP_* variables the scheduler sets.
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import List, Mapping, Optional

from trainspec.runtime import shim as contract
from trainspec.targets.hpcpack.lower import JOB_FILE, NAMESPACE, STAGE_FILE


def play_local(job_dir: Path, run) -> int:
    import subprocess
    import sys

    staged = subprocess.run(["bash", str(job_dir / STAGE_FILE)], capture_output=True, text=True)
    if staged.returncode != 0:
        print(f"trainspec: error: {STAGE_FILE} failed: {staged.stderr.strip()}", file=sys.stderr)
        return 1
    o = run.options
    return play_job(job_dir / JOB_FILE, timeout=o.timeout, out=run.out, name=run.valid.name,
                    start_delays=o.start_delays, rendezvous_timeout=o.rendezvous_timeout, hosts=run.hosts)


def play_job(job_xml: Path, *, timeout: float = 900, out=None, name: str = "job",
                 start_delays: Optional[Mapping[int, float]] = None, job_id: str = "4242",
                 retry_count: str = "0", rendezvous_timeout: float = 600, hosts=None) -> int:
    """Run a compiled HPC Pack job the way the Linux node agent would: every task's CommandLine
    written to cmd.sh and run by bash in its WorkDirectory, with the task's environment plus the
    CCP_* variables the scheduler sets; task i on the simulated host 127.0.0.(i+2).
    ``start_delays`` starts some tasks late, as a busy scheduler would."""
    import os
    import sys

    from trainspec.local.machinery import Master, Proc, base_env, job_port, port_taken, run_and_report
    from trainspec.local.netns import Loopback

    hosts = hosts or Loopback()
    ns = {"j": NAMESPACE}
    root = ET.parse(job_xml).getroot()
    tasks = root.findall("j:Tasks/j:Task", ns)
    port = job_port({v.findtext("j:Name", namespaces=ns): v.findtext("j:Value", namespaces=ns)
                      for v in root.findall("j:Tasks/j:Task/j:EnvironmentVariables/j:Variable", ns)})
    if hosts.port_taken(port):
        return port_taken(port, hosts, "targets.hpcpack.rdzv_port")
    cores = str(os.cpu_count() or 1)
    procs: List[Proc] = []
    folder = Path(job_xml).parent / "tasks"
    for i, task in enumerate(tasks):
        env = dict(base_env(hosts))
        env.update({v.findtext("j:Name", namespaces=ns): v.findtext("j:Value", namespaces=ns) or ""
                    for v in task.findall("j:EnvironmentVariables/j:Variable", ns)})
        host = hosts.address(i)
        env.update(CCP_JOBID=job_id, CCP_TASKID=str(i + 1), CCP_TASKINSTANCEID="0", CCP_RETRY_COUNT=retry_count,
                   CCP_NODES=f"1 {host} {cores}", CCP_NUMCPUS=cores, CCP_JOBNAME=root.get("Name", ""),
                   CCP_WORKDIR=task.get("WorkDirectory", ""), TRAINSPEC_MASTER_PORT=str(port))
        if contract.ENV_MASTER_ADDR in env:  # explicit node names: node 0 is simulated at its address
            env[contract.ENV_MASTER_ADDR] = hosts.address(0)
        script = folder / task.get("Name", f"task-{i}") / "cmd.sh"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(task.get("CommandLine", ""))
        delay = (start_delays or {}).get(i)
        run = f"cd {shlex.quote(task.get('WorkDirectory') or '.')} && exec /bin/bash {shlex.quote(str(script))}"
        if delay:
            run = f"sleep {delay:g} && {run}"  # the scheduler starts this task late
        procs.append(Proc(label=f"node {i}", argv=["bash", "-c", run], env=env, cwd=str(script.parent),
                          netns=hosts.netns(i)))
    print(f"trainspec: running {name} locally as HPC Pack would: {len(procs)} task(s), one per simulated node",
          file=sys.stderr)
    # node 0's shim publishes its host as the master, and its torchrun opens the store there
    master = (Master(hosts.address(0), port, procs[0].label, rendezvous_timeout, hosts.netns(0))
              if len(procs) > 1 else None)
    return run_and_report(procs, timeout, out, master)
