"""HPC Pack's master election: node 0's host, agreed through a folder every node mounts.

HPC Pack tells a task nothing about the job's other tasks, so when a job of several nodes does
not name its master (targets.hpcpack.nodes unset), the nodes agree on node 0's host through
``TRAINSPEC_RDZV_DIR/<CCP_JOBID>/`` on the shared storage. The protocol, and why a file left by
another run is never taken: docs/runtime.md, "HPC Pack".

Shipped as ``trainspec_hpcpack_election.py`` beside ``trainspec_shim.py`` in HPC Pack jobs only;
the shim's HPC Pack detector loads it by path when it has a master to elect. One file, standard
library only, Python >= 3.8, nothing else of trainspec: the shim turns an ``ElectionError`` into
its own error message.
"""

from __future__ import annotations

import os
import sys
import time

RDZV_STALE_AFTER = 86400.0  # a job folder idle this long is left over: node 0 removes it


class ElectionError(Exception):
    """The nodes did not agree (a timeout, two claims of node rank 0, an unusable folder); the
    message says why and is shown as is."""


RDZV_POLL_FIRST = 0.1  # seconds between the first looks at the directory ...
RDZV_POLL_MAX = 1.0  # ... backing off to this
RDZV_WAIT_NOTICE = 30.0  # a waiting node says so once, after this many seconds


def elect_master(rdzv_dir: str, job: str, node_rank: int, nodes: int, host: str, timeout: float,
                 identity: str = "") -> str:
    """Node 0's host, agreed through a directory every node mounts; ElectionError on a timeout or when
    two nodes claim node rank 0. Node 0 returns once every other node acknowledged its claim; a
    node returns node 0's host once node 0 confirmed this node's acknowledgement."""
    directory = os.path.join(rdzv_dir, job)
    nonce = os.urandom(8).hex()  # this process's: no file of another run can carry it
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        _write_atomic(os.path.join(directory, "node-%d" % node_rank), "%s\n" % host, host)
        if node_rank == 0:  # replaces an earlier run's claim; a concurrent one is found by _Election
            _write_atomic(os.path.join(directory, "master"), "%s\n%s\n%s\n" % (host, identity, nonce), host)
    except OSError as error:
        raise ElectionError("cannot register node %d in the rendezvous directory %s (TRAINSPEC_RDZV_DIR): %s"
                        % (node_rank, directory, error)) from None
    state = _Election(directory, node_rank, nodes, host, nonce, identity)
    start = time.monotonic()
    pause, noticed = RDZV_POLL_FIRST, False
    while True:
        master = state.step()
        if master is not None:
            if node_rank == 0:
                _remove_idle_jobs(rdzv_dir)
            return master
        waited = time.monotonic() - start
        if waited >= timeout:
            raise ElectionError(state.timed_out(timeout))
        if not noticed and waited >= RDZV_WAIT_NOTICE:
            noticed = True
            print("trainspec: node %d waiting in %s (up to %g s, TRAINSPEC_RDZV_TIMEOUT): %s"
                  % (node_rank, directory, timeout, state.waiting_for()), file=sys.stderr)
            sys.stderr.flush()
        time.sleep(min(pause, max(timeout - waited, 0.0)))
        pause = min(pause * 1.5, RDZV_POLL_MAX)


class _Election:
    """One node's view of the attempt directory; ``step()`` looks once and says the master when agreed."""

    def __init__(self, directory: str, node_rank: int, nodes: int, host: str, nonce: str, identity: str) -> None:
        self.directory, self.node_rank, self.nodes, self.host = directory, node_rank, nodes, host
        self.nonce, self.identity = nonce, identity
        self.acked: tuple[str, str] | None = None  # a follower's: (node 0's host, its nonce) it acknowledged
        self.rejected: str | None = None  # a master file ignored: why
        self.missing: list[int] = []  # node 0's: who has not acknowledged yet

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def step(self) -> str | None:
        return self._lead() if self.node_rank == 0 else self._follow()

    def _conflict(self) -> None:
        """Two claims of node rank 0 in one run: both claimers fail at once (and with them the job,
        FailOnTaskFailure); a conflict file names fresh nonces, so one left by another run never counts."""
        found = _read_lines(self.path("conflict"), 4)
        if found and self.nonce in (found[1], found[3]):
            raise ElectionError("two nodes claim node rank 0 of this job: %s and %s (their TRAINSPEC_NODE_RANK is "
                            "0 in both; %s) -- was the job edited, or is a task duplicated?"
                            % (found[0], found[2], self.path("conflict")))

    def _lead(self) -> str | None:
        self._conflict()
        master = _read_lines(self.path("master"), 3)
        if master and master[2] != self.nonce:  # replaced while this node waits: another claim of rank 0
            _write_atomic(self.path("conflict"), "%s\n%s\n%s\n%s\n" % (self.host, self.nonce, master[0], master[2]),
                          self.host)
            self._conflict()
        acks = {}
        for rank in range(1, self.nodes):
            ack = _read_lines(self.path("ack-%d" % rank), 2)
            if ack and ack[0] == self.nonce:
                acks[rank] = ack[1]
        self.missing = [rank for rank in range(1, self.nodes) if rank not in acks]
        if self.missing:
            return None
        confirmed = "".join("%d %s\n" % (rank, acks[rank]) for rank in sorted(acks))
        _write_atomic(self.path("go"), "%s\n%s" % (self.nonce, confirmed), self.host)
        return self.host

    def _follow(self) -> str | None:
        master = _read_lines(self.path("master"), 3)
        if master and master[1] != self.identity:
            self.rejected = "%s names %s but is from another run (%s)" % (self.path("master"), master[0], master[1])
        elif master and (self.acked is None or self.acked[1] != master[2]):
            self.acked = (master[0], master[2])  # (re-)acknowledge the claim now in the file
            _write_atomic(self.path("ack-%d" % self.node_rank), "%s\n%s\n" % (master[2], self.nonce), self.host)
        if self.acked is None:
            return None
        go = _read_lines(self.path("go"), 1)
        if go and go[0] == self.acked[1] and "%d %s" % (self.node_rank, self.nonce) in go[1:]:
            return self.acked[0]
        return None

    def waiting_for(self) -> str:
        if self.node_rank == 0:
            return "node(s) %s have not acknowledged node 0" % ", ".join(map(str, self.missing))
        return "node 0 has not %s" % ("confirmed this node" if self.acked else "written its master file")

    def timed_out(self, timeout: float) -> str:
        registered = _registered(self.directory)
        if self.node_rank == 0:
            return ("node(s) %s did not acknowledge node 0 (%s) within %g s (TRAINSPEC_RDZV_TIMEOUT); registered: "
                    "%s -- are their tasks queued or failed?" % (", ".join(map(str, self.missing)), self.host,
                                                              timeout, ", ".join(registered)))
        if self.acked:
            what = ("node 0 (%s) never confirmed this node in %s: that claim is not of this run (left by an "
                    "earlier run or retry of the job?) and no node 0 of this run came"
                    % (self.acked[0], self.directory))
        elif "node-0" in registered:
            what = "node 0 registered but never wrote %s" % self.path("master")
        else:
            what = "node 0 never registered in %s" % self.directory
        text = "%s within %g s (TRAINSPEC_RDZV_TIMEOUT); registered: %s -- is task 0 queued or failed?" % (
            what, timeout, ", ".join(registered) or "none")
        return text + ("; ignored %s" % self.rejected if self.rejected else "")


def _write_atomic(path: str, text: str, host: str) -> None:
    """Replace path by text in one step: readers on any node see the old file or the whole new one."""
    directory, base = os.path.split(path)
    tag = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)  # unique per node and process
    temporary = os.path.join(directory, ".%s.%s-%d.tmp" % (base, tag, os.getpid()))
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _read_lines(path: str, count: int) -> list[str] | None:
    """The lines of a complete protocol file (at least ``count`` non-empty ones, as _write_atomic
    wrote them), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle.read().split("\n")[:-1]]
    except OSError:
        return None
    if len(lines) < count or not all(lines[:count]):
        return None
    return lines


def _registered(directory: str) -> list[str]:
    """node-<rank> files in directory, in rank order."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    ranks = sorted(int(name[5:]) for name in names if name.startswith("node-") and name[5:].isdigit())
    return ["node-%d" % rank for rank in ranks]


def _protocol_file(name: str) -> bool:
    """A file elect_master writes (master, go, conflict, node-<rank>, ack-<rank>) or its temporary file."""
    name = name[1:name.index(".", 1)] if name.startswith(".") and name.endswith(".tmp") and "." in name[1:] else name
    base, dash, rank = name.partition("-")
    return name in ("master", "go", "conflict") or (base in ("node", "ack") and dash and rank.isdigit())


def _remove_idle_jobs(rdzv_dir: str) -> None:
    """Best effort: the folders of jobs idle for RDZV_STALE_AFTER, if they hold only protocol files."""
    now = time.time()
    for job in (os.listdir(rdzv_dir) if os.path.isdir(rdzv_dir) else ()):
        path = os.path.join(rdzv_dir, job)
        try:
            entries = os.listdir(path)
            if now - os.stat(path).st_mtime > RDZV_STALE_AFTER and all(map(_protocol_file, entries)):
                for entry in entries:
                    os.unlink(os.path.join(path, entry))
                os.rmdir(path)
        except OSError:
            continue
