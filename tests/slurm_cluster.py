"""A real Slurm cluster on this machine (../shared/reference/slurm.md): Debian's slurm-wlm 22.05
and munge, slurmctld and one slurmd per node, each in a network namespace of its own (with its
own host name and /etc/hosts) on a private bridge (trainspec/netns.py), fake GPUs as GRES.

    with SlurmCluster(workdir, nodes=2) as cluster:
        cluster.sbatch(script, cwd=...)        # sbatch, then the job until it ends, from the controller's namespace

Options: nodes of another size (node=H100_NODE, the size the example specs name), partitions
where jobs only queue (queue_only), tasks bound to their CPUs (bind_cpus: task/affinity).

Every daemon is started here and stopped here, by PID, whatever happens; whatever is left in a
node's namespace (a job's processes) is killed before the namespaces are deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from trainspec.local.netns import Namespaces

PACKAGES = ("slurm-wlm", "munge")
COMMANDS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "scontrol", "sinfo")
CTLD_PORT, SLURMD_PORT = 16817, 16818  # not the defaults: no clash with a real Slurm on the machine
GPUS_PER_NODE = 2
GPU_TYPE = "h100"  # the GRES type of the fake GPUs: a job may ask for it (targets.slurm.gpu_type), or for any GPU
CPUS_PER_NODE = 4
# A job's states once it has ended (JobState; COMPLETING is not one yet: its files are still open)
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE"})
POLL = 0.25  # s between reads of a submitted job's record (SlurmCluster.sbatch)


@dataclass(frozen=True)
class Node:
    """What each node claims to have (SlurmdParameters=config_overrides: whatever the machine has)."""

    cpus: int = CPUS_PER_NODE
    gpus: int = GPUS_PER_NODE
    memory_mb: int = 1  # Slurm's default RealMemory


# the nodes of the Azure size the example specs name (Standard_ND96isr_H100_v5, skus.json): 96 vCPUs,
# 8 H100, 1900 GiB; the jobs of those specs fit them, and are only queued (queue_only)
H100_NODE = Node(cpus=96, gpus=8, memory_mb=1900 * 1024)


@dataclass(frozen=True)
class Finished:
    """A job submitted and ended (SlurmCluster.sbatch); a refused one has no id and no state."""

    job_id: Optional[str]
    state: Optional[str]
    returncode: int  # the job's exit code (or its signal, or 1 for an end other than COMPLETED); sbatch's when refused
    output: str  # sbatch's own output


def missing() -> Optional[str]:
    """Why a cluster cannot be made here (after trying to install Slurm), or None."""
    if os.geteuid() != 0:
        return "needs root: it creates network namespaces and runs slurmd"
    for tool in ("ip", "nsenter", "unshare", "mknod"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not all(shutil.which(c) for c in COMMANDS):
        if shutil.which("apt-get") is None:
            return "Slurm is not installed and there is no apt-get to install it (Debian: slurm-wlm munge)"
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
            if done.returncode != 0:
                return f"`{' '.join(argv)}` failed: {done.stderr.strip()[-400:]}"
        if not all(shutil.which(c) for c in COMMANDS):
            return f"installed {' '.join(PACKAGES)} but {', '.join(c for c in COMMANDS if not shutil.which(c))} missing"
    return None


class SlurmCluster:
    def __init__(self, workdir: Path, nodes: int = 2, slurmd_timeout: int = 10, min_job_age: int = 16,
                 bind_cpus: bool = False, node: Optional[Node] = None, queue_only: Sequence[str] = ()) -> None:
        self.dir = Path(workdir)
        self.node = node or Node()
        # partitions over every node that are down from the start: sbatch still holds a job to what the
        # nodes have (and names the partition's refusal), then the job waits in the queue and never runs
        self.queue_only = tuple(queue_only)
        # task/affinity: slurmd binds each task to the CPUs its step gave it (sched_setaffinity; no
        # cgroups needed), as a production cluster does. The fake nodes claim their CPUs (Node)
        # whatever the machine has, and Slurm folds their masks onto the machine's CPUs (4 on a
        # machine of 2: CPUs 0-1 on CPU 0, 2-3 on CPU 1). Off unless asked: unbound, the per-node
        # and per-process jobs of the other tests keep every CPU of the machine.
        self.task_plugin = "task/affinity" if bind_cpus else "task/none"
        self.nodes = nodes
        self.names = [f"n{i + 1}" for i in range(nodes)]
        self.slurmd_timeout = slurmd_timeout
        self.min_job_age = min_job_age  # s a finished job stays in slurmctld's memory (sbatch below)
        self.net = Namespaces(nodes + 1)  # 0: the controller; 1..nodes: the nodes
        self.daemons: List[subprocess.Popen] = []
        self.conf = self.dir / "slurm.conf"

    # ------------------------------------------------------------------ bring-up

    def __enter__(self) -> "SlurmCluster":
        try:
            self.net.__enter__()
            self._files()
            self._start(["munged", "-F", "--force", f"--socket={self.dir / 'munge.socket'}",
                         f"--key-file={self.dir / 'munge.key'}", f"--pid-file={self.dir / 'munged.pid'}",
                         f"--log-file={self.dir / 'munged.log'}", f"--seed-file={self.dir / 'munge.seed'}"])
            self._wait_for(lambda: (self.dir / "munge.socket").exists(), 30, "munged's socket")
            self._start(self._in_node(0, "ctl", ["slurmctld", "-D", "-f", str(self.conf)]))
            for i, name in enumerate(self.names, 1):
                self._start(self._in_node(i, name, ["slurmd", "-D", "-N", name, "-f", str(self.conf)]))
            self._wait_for(self._all_idle, 120, "every node idle in sinfo")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _files(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for sub in ("state", "spool", "dev"):
            (self.dir / sub).mkdir(exist_ok=True)
        subprocess.run(["mungekey", "-c", "-f", "-k", str(self.dir / "munge.key")], check=True, capture_output=True)
        os.chmod(self.dir / "munge.key", 0o600)
        for gpu in range(self.node.gpus):  # devices with /dev/null's numbers: count-only GRES registers 0
            device = self.dir / "dev" / f"gpu{gpu}"
            if not device.exists():
                subprocess.run(["mknod", str(device), "c", "1", "3"], check=True)
        hosts = ["127.0.0.1 localhost", f"{self.net.address(0)} ctl"]
        hosts += [f"{self.net.address(i)} {name}" for i, name in enumerate(self.names, 1)]
        (self.dir / "hosts").write_text("\n".join(hosts) + "\n")
        (self.dir / "gres.conf").write_text(
            f"NodeName={','.join(self.names)} Name=gpu Type={GPU_TYPE} "
            f"File={self.dir / 'dev'}/gpu[0-{self.node.gpus - 1}]\n")
        nodes = "\n".join(f"NodeName={name} NodeAddr={self.net.address(i)} NodeHostname={name} "
                          f"CPUs={self.node.cpus} RealMemory={self.node.memory_mb} "
                          f"Gres=gpu:{GPU_TYPE}:{self.node.gpus} State=UNKNOWN"
                          for i, name in enumerate(self.names, 1))
        self.conf.write_text(f"""\
ClusterName=trainspec
SlurmctldHost=ctl({self.net.address(0)})
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
AuthInfo=socket={self.dir / 'munge.socket'}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.dir / 'state'}
SlurmdSpoolDir={self.dir / 'spool'}/%n
SlurmctldPidFile={self.dir / 'slurmctld.pid'}
SlurmdPidFile={self.dir / 'slurmd'}-%n.pid
SlurmctldLogFile={self.dir / 'slurmctld.log'}
SlurmdLogFile={self.dir / 'slurmd'}-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin={self.task_plugin}
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
SlurmdTimeout={self.slurmd_timeout}
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge={self.min_job_age}
EnforcePartLimits=ALL
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""" + "".join(f"PartitionName={name} Nodes=ALL MaxTime=INFINITE State=DOWN\n" for name in self.queue_only))

    def _in_node(self, index: int, name: str, argv: List[str]) -> List[str]:
        """argv in the node's network namespace, with its own host name and /etc/hosts (nsenter, not
        `ip netns exec`, which remounts /sys and so hides the cgroup file system slurmd loads)."""
        script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{self.net.netns(index)}", "unshare", "--mount", "--uts",
                "--propagation", "private", "sh", "-c", script, str(self.dir / "hosts"), name, *argv]

    def _start(self, argv: List[str]) -> None:
        log = open(self.dir / f"{Path(argv[0]).name}-{len(self.daemons)}.out", "w")
        self.daemons.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=self.env(), start_new_session=True))
        log.close()

    def env(self) -> dict:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def _wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise RuntimeError(f"{daemon.args} exited with {daemon.returncode} while waiting for {what}: "
                                       + self.logs())
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {timeout} s: " + self.logs())
            time.sleep(0.2)

    def _all_idle(self) -> bool:
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %t"])
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return done.returncode == 0 and all(states.get(name) == "idle" for name in self.names)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    # ------------------------------------------------------------------ use

    def run(self, argv: List[str], cwd: Optional[Path] = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command, from the controller's namespace."""
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.net.netns(0)}", *argv], cwd=cwd, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def sbatch(self, script: Path, cwd: Path, timeout: float = 600, path: Optional[str] = None) -> Finished:
        """`sbatch script` from ``cwd`` as a user submits it (``path``: its PATH), then the job's
        record read every POLL seconds until the job has ended, bounded by ``timeout``. Not `sbatch
        --wait`: that reads it after 2 s, then every 8 s (it quadruples its wait while the wait is
        under MinJobAge / 2), so a job of 11 s returned after 18 s. A finished job's record stays
        MinJobAge (16 s, slurm.conf above) and until the controller's next purge: read here at once."""
        env = ["env", f"PATH={path}"] if path else []
        done = self.run([*env, "sbatch", str(script)], cwd=cwd)
        output = done.stdout + done.stderr
        found = re.search(r"Submitted batch job (\d+)", done.stdout)
        if done.returncode != 0 or not found:
            return Finished(None, None, done.returncode or 1, output)
        job_id = found.group(1)
        deadline = time.monotonic() + timeout
        while True:
            record = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
            state = re.search(r"\bJobState=(\S+)", record)
            if state and state.group(1) in FINAL_STATES:
                exit_code, signal_ = re.search(r"\bExitCode=(\d+):(\d+)", record).groups()
                code = int(exit_code) or int(signal_) or (0 if state.group(1) == "COMPLETED" else 1)
                return Finished(job_id, state.group(1), code, output)
            if time.monotonic() > deadline:
                self.run(["scancel", job_id])
                raise AssertionError(f"job {job_id} did not end within {timeout} s: {record}")
            time.sleep(POLL)

    def kill_node(self, index: int) -> None:
        """The node dies: everything in its network namespace (slurmd, the job's step, its tasks)."""
        pids = subprocess.run(["ip", "netns", "pids", self.net.netns(index)], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ tear-down

    def __exit__(self, *exc) -> None:
        try:
            for daemon in reversed(self.daemons):
                if daemon.poll() is None:
                    os.killpg(daemon.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            for daemon in self.daemons:
                try:
                    daemon.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    daemon.wait()
            for index in range(self.nodes + 1):  # a job's processes, started by slurmstepd
                if self.net.created:
                    self.kill_node(index)
        finally:
            self.net.__exit__(None, None, None)
