"""Run a handful of processes as one job, the way a cluster would: `trainspec run --local`,
and (shipped next to it as trainspec_procs.py) the Ray target's driver.

Each process gets its own process group, so whatever it spawns (Lightning's
workers, torchrun's agents) dies with it.  Output is interleaved line by line
with a ``[label] `` prefix.  The first failure stops the job after a grace
period, like a scheduler tearing down a failed distributed job, and nothing is
left running when ``run_all`` returns, whatever happened.

What both runners share, whoever holds the processes (this one, or Ray actors on other
nodes): ``start_group``/``pump_lines``/``stop_group`` for one process group, ``exit_code``
for its status, and ``Verdict``, the rule that ends a job.  Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, Deque, List, Mapping, Optional, Sequence, Tuple

TAIL_LINES = 30
PROBE_EVERY = 0.25  # seconds between connection attempts to the master address
MASTER_SILENT = -1  # in the exit queue: the master never opened
KILL_AFTER = 5.0  # seconds between SIGTERM and SIGKILL
READER_JOIN = 5.0  # seconds to wait for output still buffered in a pipe after the processes ended


@dataclass(frozen=True)
class Proc:
    """One process to start; the caller builds its complete argv and environment."""

    label: str  # output prefix, e.g. "rank 3" or "node 1"
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    netns: Optional[str] = None  # a network namespace to run in (`ip netns exec`), or this one


@dataclass(frozen=True)
class Master:
    """Where the job's rendezvous must open (MASTER_ADDR:MASTER_PORT), who opens it (the label of
    rank 0's process, or node 0's for torchrun), and how long the others may wait for it."""

    host: str
    port: int
    label: str
    timeout: float
    netns: Optional[str] = None  # where the address is reachable from, if not from here


@dataclass(frozen=True)
class Ending:
    """How one of the other processes ended, once the first had failed (or the run was stopped)."""

    label: str
    exit_code: int  # signal -> 128+sig
    stopped_by: Optional[str]  # None: it exited by itself; "SIGTERM" or "SIGKILL": after the runner sent that
    at: float  # seconds from the start of the run


@dataclass
class Result:
    """How the job ended."""

    exit_code: int  # 0 if all exited 0, else the first failing process's code (signal -> 128+sig)
    failed: Optional[str]  # label of the first failing process (or of the master that never opened)
    tail: List[str]  # its last lines
    timed_out: bool
    master_silent: bool = False  # nothing listened on the master address within Master.timeout
    failed_at: Optional[float] = field(default=None, compare=False)  # seconds from the start to the first failure
    others: List[Ending] = field(default_factory=list, compare=False)  # every process but the failed one, in order


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on host right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def loopback_host(node_rank: int) -> str:
    """A distinct loopback address per simulated node: 127.0.0.2, 127.0.0.3, ..."""
    if not 0 <= node_rank <= 252:
        raise ValueError("node_rank %d has no loopback address (0..252)" % node_rank)
    return "127.0.0.%d" % (node_rank + 2)


# ---------------------------------------------------------------- what both runners share

def exit_code(returncode: int) -> int:
    """Popen's -N for "killed by signal N" becomes the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def start_group(argv: Sequence[str], env: Mapping[str, str], cwd: str,
                preexec_fn: Optional[Callable[[], None]] = None) -> "subprocess.Popen[bytes]":
    """argv in a session (so a process group) of its own: stdout and stderr in one pipe, no stdin."""
    return subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec_fn)


def pump_lines(pipe: IO[bytes], on_line: Callable[[str], None]) -> None:
    """Every line of ``pipe`` until it closes, decoded, without its line end."""
    for raw in iter(pipe.readline, b""):
        on_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))


def signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has exited


def stop_group(pid: int, grace: float, ended: Callable[[float], object]) -> None:
    """SIGTERM the group, wait up to ``grace`` s (``ended(seconds)`` waits for the leader's exit),
    then SIGKILL it: also when the leader is gone, whatever it left in its group goes too."""
    signal_group(pid, signal.SIGTERM)
    ended(grace)
    signal_group(pid, signal.SIGKILL)


class Verdict:
    """How a job of several processes ends, as they end one by one: when all exited 0, code 0;
    the first non-zero exit decides the code, and the others get ``grace`` seconds to end by
    themselves (they usually fail too, once a peer is gone) before the runner stops them; past
    ``deadline`` (a time.monotonic() value, or None), code 124 as coreutils' timeout."""

    def __init__(self, count: int, grace: float, deadline: Optional[float]) -> None:
        self.running = count
        self.grace = grace
        self.until = deadline
        self.failed: Optional[int] = None  # the index of the first failing process
        self.code = 0

    def ended(self, index: int, returncode: int) -> None:
        self.running -= 1
        if returncode != 0 and self.failed is None:
            self.failed, self.code = index, exit_code(returncode)
            grace_ends = time.monotonic() + self.grace
            self.until = grace_ends if self.until is None else min(self.until, grace_ends)

    def budget(self) -> Optional[float]:
        """Seconds until the job must be stopped (None: no limit yet)."""
        return None if self.until is None else max(0.0, self.until - time.monotonic())

    @property
    def over(self) -> bool:
        return self.running == 0 or (self.until is not None and time.monotonic() >= self.until)

    @property
    def timed_out(self) -> bool:
        return self.failed is None and self.running > 0 and self.over

    @property
    def exit_code(self) -> int:
        return self.code if self.failed is not None else 124 if self.timed_out else 0


class _Job:
    """The started processes, their reader and waiter threads, and the queue of exits."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.exits: queue.Queue[Tuple[int, int]] = queue.Queue()
        self.labels: List[str] = []
        self.popens: List[subprocess.Popen[bytes]] = []
        self.tails: List[Deque[str]] = []
        self.readers: List[threading.Thread] = []
        self.waiters: List[threading.Thread] = []
        self.watchers: List[threading.Thread] = []
        self.probes: List[subprocess.Popen[bytes]] = []
        self.done = threading.Event()
        self.started = time.monotonic()
        self.ended: List[Optional[Tuple[float, int, Optional[str]]]] = []  # (when, returncode, signal sent before)
        self.sent: Optional[str] = None  # the last signal stop() sent to every group

    def start(self, proc: Proc) -> None:
        index = len(self.popens)
        argv = list(proc.argv) if proc.netns is None else ["ip", "netns", "exec", proc.netns, *proc.argv]
        popen = start_group(argv, proc.env, proc.cwd)
        self.labels.append(proc.label)
        self.popens.append(popen)
        self.tails.append(deque(maxlen=TAIL_LINES))
        self.ended.append(None)
        for target, threads in ((self._read, self.readers), (self._wait, self.waiters)):
            thread = threading.Thread(target=target, args=(index,), name="%s %s" % (target.__name__, proc.label))
            thread.daemon = True
            thread.start()
            threads.append(thread)

    def _read(self, index: int) -> None:
        prefix, tail, pipe = "[%s] " % self.labels[index], self.tails[index], self.popens[index].stdout
        assert pipe is not None

        def show(line: str) -> None:
            tail.append(line)
            with self.lock:
                self.out.write(prefix + line + "\n")
                self.out.flush()

        pump_lines(pipe, show)

    def _wait(self, index: int) -> None:
        returncode = self.popens[index].wait()
        self.ended[index] = (time.monotonic() - self.started, returncode, self.sent)
        self.exits.put((index, returncode))

    def watch(self, master: Master) -> None:
        """Until the master address accepts a connection: past master.timeout, report it silent.
        A bare connect and close is harmless to torch's TCPStore (and to torchrun's). The probe
        is a small process, so it can run inside the network namespace that reaches the address;
        stop() kills it with the job."""
        code = ("import socket, sys, time\n"
                f"deadline = time.monotonic() + {master.timeout!r}\n"
                "while time.monotonic() <= deadline:\n"
                "    try:\n"
                f"        socket.create_connection(({master.host!r}, {master.port}), {PROBE_EVERY}).close()\n"
                "        sys.exit(0)\n"
                "    except OSError:\n"
                f"        time.sleep({PROBE_EVERY})\n"
                "sys.exit(1)\n")
        argv = [sys.executable, "-I", "-S", "-c", code]
        if master.netns is not None:
            argv = ["ip", "netns", "exec", master.netns, *argv]
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.probes.append(popen)

        def wait_for_probe() -> None:
            if popen.wait() != 0 and not self.done.is_set():
                self.exits.put((MASTER_SILENT, 124))

        thread = threading.Thread(target=wait_for_probe, name="watch master", daemon=True)
        thread.start()
        self.watchers.append(thread)

    def wait(self, timeout: float, grace: float) -> Tuple[int, Optional[int], bool]:
        """Block until all exited, or grace after the first failure, or timeout.

        Returns (exit code, index of the first failing process, timed out).
        """
        verdict = Verdict(len(self.popens), grace, time.monotonic() + timeout)
        while not verdict.over:
            try:
                index, returncode = self.exits.get(timeout=verdict.budget())
            except queue.Empty:
                continue
            if index == MASTER_SILENT:
                if verdict.failed is None:
                    return returncode, MASTER_SILENT, False
                continue  # a process failed first: that is the story
            verdict.ended(index, returncode)
        return verdict.exit_code, verdict.failed, verdict.timed_out

    def stop(self) -> None:
        """SIGTERM every process group, SIGKILL after KILL_AFTER; reap the processes and drain their output."""
        self.done.set()
        for probe in self.probes:
            if probe.poll() is None:
                probe.kill()
        for watcher in self.watchers:
            watcher.join()
        self.sent = "SIGTERM"
        self._signal_groups(signal.SIGTERM)
        deadline = time.monotonic() + KILL_AFTER
        for waiter in self.waiters:
            waiter.join(max(0.0, deadline - time.monotonic()))
        # Also for groups whose leader is gone: its children may still hold on.
        self.sent = "SIGKILL"
        self._signal_groups(signal.SIGKILL)
        for waiter in self.waiters:
            waiter.join()
        deadline = time.monotonic() + READER_JOIN
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))

    def endings(self, skip: Optional[int]) -> List[Ending]:
        """How every process but ``skip`` ended (after stop())."""
        return [Ending(label, exit_code(ended[1]), ended[2], ended[0])
                for index, (label, ended) in enumerate(zip(self.labels, self.ended))
                if index != skip and ended is not None]

    def _signal_groups(self, signum: int) -> None:
        for popen in self.popens:
            signal_group(popen.pid, signum)


def run_all(procs: Sequence[Proc], *, timeout: float, grace: float = 10.0, out: IO[str] = sys.stdout,
            master: Optional[Master] = None) -> Result:
    """Run procs together, streaming their output to out, and tear all down on the first failure.

    The first process to exit non-zero decides the exit code; the others get
    ``grace`` seconds to exit by themselves (they usually fail too, once a peer
    is gone), then SIGTERM, then SIGKILL.  On ``timeout`` all are killed and the
    exit code is 124, as with coreutils' timeout.  With ``master``, a job whose
    master address accepts no connection within master.timeout is stopped the
    same way (exit 124, ``master_silent``), instead of waiting in the rendezvous
    until torch's own timeout (30 minutes by default).  Ctrl-C kills all and re-raises.
    ``Result.others`` tells how every other process ended: by itself, or after SIGTERM / SIGKILL.
    """
    job = _Job(out)
    try:
        for proc in procs:
            job.start(proc)
        if master is not None:
            job.watch(master)
        exit_code, failed, timed_out = job.wait(timeout, grace)
    finally:
        job.stop()
    if failed == MASTER_SILENT:
        assert master is not None
        index = job.labels.index(master.label) if master.label in job.labels else None
        return Result(exit_code=exit_code, failed=master.label, timed_out=False, master_silent=True,
                      tail=[] if index is None else list(job.tails[index]), others=job.endings(index))
    return Result(
        exit_code=exit_code,
        failed=None if failed is None else job.labels[failed],
        tail=[] if failed is None else list(job.tails[failed]),
        timed_out=timed_out,
        failed_at=None if failed is None else job.ended[failed][0],  # type: ignore[index]
        others=job.endings(failed),
    )
