"""The machinery of `trainspec run --local`, below the targets: what a target's ``play_local``
gets (``LocalRun``), the environment a simulated platform process starts from, and one way to
run a job's processes and report how they ended (runtime/procs.py decides, this says it).

The command that compiles a spec and hands the job to its target's play is commands/run.py;
a target's own play is targets/<name>/local.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from trainspec.runtime import shim as contract
from trainspec.runtime.procs import Master, Proc, run_all

__all__ = ["LocalRun", "Master", "Proc", "RUN_LOG", "RunOutput", "base_env", "job_port", "port_taken",
           "run_and_report", "starts_shutdown_noise"]

RUN_LOG = "run.log"  # in the work directory: every line every process printed, as the terminal showed it

# Variables a platform sets: never inherited from the shell that runs `trainspec run`.
_PLATFORM_PREFIXES = ("OMPI_", "PMIX_", "AZ_BATCH", "AZUREML_", "TORCHELASTIC_", "SLURM_", "CCP_", "PL_TRAINER_",
                      contract.ENV_PREFIX)
_PLATFORM_NAMES = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                   "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "TF_CONFIG"}



@dataclass
class LocalRun:
    """What a target's ``play_local(job_dir, run)`` gets: the run's options, the validated spec,
    the work directory, the simulated hosts (loopback addresses or network namespaces) and
    where the processes' output goes. The machinery to start and watch processes is below."""

    options: Any  # commands/run.py's LocalOptions
    valid: Any
    workdir: Path
    hosts: Any
    out: Any

    def copy_code(self) -> Path:
        """A fresh copy of the spec's code directory, as the platform would upload it."""
        code = self.workdir / "code"
        if code.exists():
            shutil.rmtree(code)
        # symlinks=True: a link is copied as a link, never followed (validation refuses one anyway)
        shutil.copytree(self.valid.resolve(self.valid.spec.code), code, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", ".git", "lightning_logs", "outputs"))
        return code



# torchrun's agent once its workers are done: the exit barrier waits on the store that node 0's
# agent hosts, and node 0 may already have left it (c10d's TCPStore warning with a C++ stack, then
# the agent's "Error waiting on exit barrier" with a Python one: ~35 lines per node, exit code 0);
# or the agent was stopped (a death signal, SignalException's stack). Each starts with one of these.
_GLOG = r"^\[?[IWEF]\d{4} [\d:.]+ +(?:\d+ +)?"  # torch's log prefix, C++ ([W1204 15:21:49.46 ...) or Python
_SHUTDOWN_NOISE = re.compile(
    _GLOG + r"(?:\S*/)?TCPStore\.cpp:\d+\] \[c10d\] .*(?:connection|closed|reset|broken pipe|failed to recv)"
    "|" + _GLOG + r"\S*torch/distributed/elastic/\S+\] (?:Error waiting on exit barrier|Received \d+ death signal"
    r"|Got termination signal)", re.IGNORECASE)


def starts_shutdown_noise(line: str) -> bool:
    """Whether ``line`` (as a process printed it) opens torchrun's shutdown messages: a store
    connection gone at the exit barrier, or the agent told to stop. Its workers are done by then."""
    return bool(_SHUTDOWN_NOISE.match(line))


class RunOutput:
    """Where the processes' lines go: every line to the run's log (``log``) as it comes, and to
    the terminal -- except torchrun's shutdown messages. From the line that opens them
    (``starts_shutdown_noise``) a process's further lines are held: a run that succeeds never
    shows them (they are in the log), a run that fails shows them once it has ended, before its
    report. Written to by one thread at a time (run_all's lock), a whole line per write."""

    def __init__(self, terminal, log: Path, removed: bool = False) -> None:
        self.terminal = terminal
        self.log_path = log
        self.removed = removed  # the log goes with a temporary work directory
        self._log = None
        self._held: Dict[str, List[str]] = {}  # prefix ("[node 1] ") -> its held lines

    def __enter__(self) -> "RunOutput":
        self._log = open(self.log_path, "a", encoding="utf-8", errors="backslashreplace")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def write(self, text: str) -> int:
        if self._log is not None:
            self._log.write(text)
        prefix, _, line = text.partition("] ")
        key = prefix + "] " if prefix.startswith("[") and _ else ""
        held = self._held.get(key)
        if held is None and starts_shutdown_noise(line if key else text):
            held = self._held[key] = []
        if held is not None:
            held.append(text)
        else:
            self.terminal.write(text)
        return len(text)

    def flush(self) -> None:
        if self._log is not None:
            self._log.flush()
        self.terminal.flush()

    def finish(self, succeeded: bool) -> int:
        """The run has ended: if it failed, show what was held; the number of lines not shown."""
        held = [text for lines in self._held.values() for text in lines]
        self._held = {}
        if succeeded:
            return len(held)
        for text in held:
            self.terminal.write(text)
        self.terminal.flush()
        return 0

    def where(self) -> str:
        return str(self.log_path) + (" (removed with the temporary work directory: --keep keeps it)"
                                     if self.removed else "")


def run_and_report(procs: List[Proc], timeout: float, out, master: Optional[Master] = None) -> int:
    started = time.monotonic()
    result = run_all(procs, timeout=timeout, out=out or sys.stdout, master=master)
    elapsed = time.monotonic() - started
    hidden = out.finish(result.exit_code == 0) if isinstance(out, RunOutput) else 0
    if result.exit_code == 0:
        print(f"trainspec: all {len(procs)} processes exited 0 in {elapsed:.1f} s", file=sys.stderr)
        if hidden:
            print(f"trainspec: {hidden} lines of torchrun's shutdown messages after the work was done (its exit "
                  f"barrier, or a stop) are not shown; they are in the run's log, {out.where()}", file=sys.stderr)
        return 0
    if result.master_silent:
        assert master is not None
        print(f"trainspec: error: nothing listened on the master address {master.host}:{master.port} within "
              f"{master.timeout:g} s: {master.label} never opened the rendezvous (it hung, or is still busy before "
              "init_process_group), so every other process would have waited for torch's own timeout; every "
              f"process was stopped after {elapsed:.1f} s (hint: --rendezvous-timeout SECONDS if {master.label} "
              "needs longer). Its last lines:", file=sys.stderr)
        for line in result.tail:
            print(f"  | {line}", file=sys.stderr)
        return result.exit_code
    if result.timed_out:
        print(f"trainspec: error: the run did not finish within {timeout:g} s; every process was stopped",
              file=sys.stderr)
        return result.exit_code
    print(f"trainspec: error: {result.failed} exited with code {result.exit_code}{_signal_name(result.exit_code)} "
          f"after {result.failed_at or elapsed:.1f} s; the run was stopped{_how_the_others_ended(result)}. "
          f"Its last lines ({result.failed}):", file=sys.stderr)
    for line in result.tail:
        print(f"  | {line}", file=sys.stderr)
    return result.exit_code


def _signal_name(exit_code: int) -> str:
    """' (SIGKILL)' for 137: the shell's 128+n for a process killed by signal n."""
    try:
        return f" ({signal.Signals(exit_code - 128).name})" if exit_code > 128 else ""
    except ValueError:
        return ""


def _how_the_others_ended(result) -> str:
    """'; the other 3 processes ended within 1.2 s: rank 0 and rank 1 exited by themselves (code 1);
    rank 3 was stopped by SIGTERM' -- who failed on their own once a peer was gone, whom the runner stopped."""
    others = result.others
    if not others:
        return ""
    groups: Dict[Tuple[Optional[str], int], List[str]] = {}
    for ending in others:
        key = (ending.stopped_by, 0) if ending.stopped_by else (None, ending.exit_code)
        groups.setdefault(key, []).append(ending.label)

    def told(key: Tuple[Optional[str], int], labels: List[str]) -> str:
        shown = labels if len(labels) <= 4 else labels[:3] + [f"{len(labels) - 3} more"]
        names = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
        stopped_by, code = key
        if stopped_by:
            return f"{names} {'was' if len(labels) == 1 else 'were'} stopped by {stopped_by}"
        if code == 0:
            return f"{names} had finished (code 0)"
        return f"{names} exited by {'itself' if len(labels) == 1 else 'themselves'} (code {code})"

    within = max(0.0, max(ending.at for ending in others) - (result.failed_at or 0.0))
    plural = "process" if len(others) == 1 else f"{len(others)} processes"
    return (f"; the other {plural} ended within {within:.1f} s: "
            + "; ".join(told(key, labels) for key, labels in groups.items()))


def base_env(hosts) -> Dict[str, str]:
    startup = sys.modules.get("trainspec.cli")  # what the CLI set for its own start-up is not the job's
    own = set(getattr(startup, "CLI_STARTUP_ENV", ()))
    env = {k: v for k, v in os.environ.items()
           if k not in _PLATFORM_NAMES and not k.startswith(_PLATFORM_PREFIXES) and k not in own}
    # the job's `python` is the interpreter trainspec runs under (its virtualenv, its torch)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["GLOO_SOCKET_IFNAME"] = hosts.interface  # loopback, or the namespace's one interface
    return env


def job_port(env: Mapping[str, Any]) -> int:
    """The port the compiled job names (the spec's master_port, or HPC Pack's rdzv_port): the run
    uses it as the platform would, so a port the job cannot open shows up here."""
    return int(env.get(contract.ENV_MASTER_PORT) or contract.AZUREML_MASTER_PORT)


def port_taken(port: int, hosts, field_: str) -> int:
    print(f"trainspec: error: port {port} on {hosts.address(0)} (simulated node 0) is taken: the job uses the "
          f"spec's port, as the platform would, and something here already listens on it (another run?) "
          f"(hint: stop it, or try another port for this run with --set {field_}=PORT)", file=sys.stderr)
    return 1


