"""The local multi-process runner: output, first failure, timeout, no orphans.

Every child carries a marker variable, so "nothing left running" is checked by
scanning /proc for live processes with that marker (grandchildren inherit it).
The sleeping children stand in for hung ranks; the tests themselves never sleep.
"""

import io
import os
import sys
import time
import uuid

import pytest

from conftest import processes_with
from trainspec.runtime import procs
from trainspec.runtime.procs import Proc, Result, free_port, loopback_host, run_all

SLEEP = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(60)"


@pytest.fixture
def marker():
    return "trainspec-test-%s" % uuid.uuid4().hex


def proc(label, code, marker):
    env = {"PATH": os.environ["PATH"], "TRAINSPEC_TEST_MARKER": marker}
    return Proc(label=label, argv=[sys.executable, "-c", code], env=env, cwd=os.getcwd())


def live_with(marker):
    """Pids of live processes (not zombies) started by proc() with marker."""
    return processes_with("TRAINSPEC_TEST_MARKER=%s" % marker)


def test_outputs_are_prefixed_and_complete(marker):
    out = io.StringIO()
    code = "import sys\nfor i in range(50): print('line', i, flush=True)\nprint('err', file=sys.stderr)"
    result = run_all([proc("rank %d" % r, code, marker) for r in range(3)], timeout=600, out=out)
    assert result == Result(exit_code=0, failed=None, tail=[], timed_out=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 * 51
    for r in range(3):
        mine = [line for line in lines if line.startswith("[rank %d] " % r)]
        assert mine == ["[rank %d] line %d" % (r, i) for i in range(50)] + ["[rank %d] err" % r]


def test_first_failure_stops_the_rest_within_grace(marker):
    fail = "import sys\nfor i in range(40): print('step', i)\nsys.exit(7)"
    jobs = [proc("rank 0", SLEEP, marker), proc("rank 1", fail, marker), proc("rank 2", SLEEP, marker)]
    result = run_all(jobs, timeout=600, grace=0.5, out=io.StringIO())
    assert (result.exit_code, result.failed, result.timed_out) == (7, "rank 1", False)
    assert result.tail == ["step %d" % i for i in range(10, 40)]
    # the report says who else was stopped, and how
    assert [(e.label, e.exit_code, e.stopped_by) for e in result.others] == [("rank 0", 143, "SIGTERM"),
                                                                            ("rank 2", 143, "SIGTERM")]
    assert all(e.at >= result.failed_at + 0.5 for e in result.others)  # after the grace, not before
    # ... and soon after it: SIGTERM ends a sleeping child at once (the runner's clock, from the failure on)
    assert all(e.at - result.failed_at < 0.5 + procs.KILL_AFTER for e in result.others), result.others
    assert live_with(marker) == []


def test_a_signal_death_is_reported_as_128_plus_signal(marker):
    result = run_all([proc("rank 0", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", marker)],
                     timeout=600, out=io.StringIO())
    assert (result.exit_code, result.failed) == (137, "rank 0")


def test_timeout_kills_everything(marker):
    out = io.StringIO()
    result = run_all([proc("node %d" % n, SLEEP, marker) for n in range(2)], timeout=1.0, out=out)
    assert (result.exit_code, result.failed, result.timed_out) == (124, None, True)
    assert live_with(marker) == []


def test_sigterm_ignored_then_sigkill(marker, monkeypatch):
    """The child ignores SIGTERM from birth (an ignored signal is inherited through fork and exec),
    so it is stubborn however late the busy machine lets it run."""
    import signal

    monkeypatch.setattr(procs, "KILL_AFTER", 0.5)
    stubborn = "import time; print('ready', flush=True); time.sleep(60)"
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        result = run_all([proc("rank 0", stubborn, marker)], timeout=1.0, out=io.StringIO())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.exit_code == 124
    assert [(e.label, e.exit_code, e.stopped_by) for e in result.others] == [("rank 0", 137, "SIGKILL")]
    assert live_with(marker) == []


def test_grandchild_dies_with_its_group(marker):
    # The parent starts a grandchild that holds the output pipe, then fails.
    parent = ("import subprocess, sys; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print('grandchild', child.pid, flush=True); sys.exit(5)")
    out = io.StringIO()
    result = run_all([proc("rank 0", parent, marker)], timeout=600, out=out)
    assert (result.exit_code, result.failed) == (5, "rank 0")
    grandchild = int(out.getvalue().split("grandchild")[1].split()[0])
    assert grandchild > 0 and live_with(marker) == []


def test_keyboard_interrupt_kills_and_reraises(marker, monkeypatch):
    def interrupted(self, timeout, grace):
        raise KeyboardInterrupt  # as Ctrl-C would, while waiting for the processes

    monkeypatch.setattr(procs._Job, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_all([proc("rank 0", SLEEP, marker)], timeout=600, out=io.StringIO())
    assert live_with(marker) == []


def test_free_port_and_loopback_hosts():
    port = free_port()
    assert 0 < port < 65536
    assert [loopback_host(n) for n in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert free_port(loopback_host(1)) > 0
    with pytest.raises(ValueError):
        loopback_host(253)


def test_live_with_finds_a_marked_process(marker):
    """The orphan checks above are only as good as this scan."""
    import subprocess

    # Popen returns once exec has begun, but /proc/PID/environ reads empty until the new program's
    # stack is set up: wait for a line from it (a scan just after Popen failed on a busy machine)
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                             env={"TRAINSPEC_TEST_MARKER": marker}, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"
        assert live_with(marker) == [child.pid]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert live_with(marker) == []


# ---------------------------------------------------------------- the master address


def _listener(port):
    """rank 0 opening the rendezvous: listen on the port, then wait for a peer's line."""
    return ("import socket, sys\n"
            f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
            "s.listen(8); print('listening', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); data = c.recv(100)\n"
            "    if data: print('got', data.decode(), flush=True); break\n")


def _peer(port):
    """another rank: connect when the master is up (retrying as torch's store client does), say hello."""
    return ("import socket, time\n"
            "while True:\n"
            "    try:\n"
            f"        c = socket.create_connection(('127.0.0.1', {port})); break\n"
            "    except OSError: time.sleep(0.05)\n"
            "c.sendall(b'hello'); print('sent', flush=True)\n")


def test_a_master_that_opens_lets_the_run_finish(marker):
    port = free_port()
    master = procs.Master("127.0.0.1", port, "rank 0", timeout=600)  # over as soon as rank 0 listens
    out = io.StringIO()
    result = run_all([proc("rank 0", _listener(port), marker), proc("rank 1", _peer(port), marker)],
                     timeout=600, out=out, master=master)
    assert result == Result(exit_code=0, failed=None, tail=[], timed_out=False), out.getvalue()
    assert "[rank 0] got hello" in out.getvalue()
    assert live_with(marker) == []


def test_a_master_that_never_opens_stops_the_run(marker):
    """Rank 0 prints first thing (a bare interpreter start, ~0.05 s) and never listens: the bound
    is far above that start on a loaded machine, so its line is always in the tail."""
    port = free_port()
    timeout = 8.0
    master = procs.Master("127.0.0.1", port, "rank 0", timeout=timeout)
    started = time.monotonic()
    result = run_all([proc("rank 0", "print('stuck before init', flush=True)\n" + SLEEP, marker),
                      proc("rank 1", _peer(port), marker)], timeout=600, out=io.StringIO(), master=master)
    assert (result.exit_code, result.failed, result.master_silent, result.timed_out) == (124, "rank 0", True, False)
    assert "stuck before init" in result.tail
    elapsed = time.monotonic() - started
    assert timeout <= elapsed < timeout + procs.KILL_AFTER + 30, elapsed  # not the run's timeout (600 s)
    assert live_with(marker) == []


def test_a_failure_before_the_master_timeout_is_the_story(marker):
    port = free_port()
    master = procs.Master("127.0.0.1", port, "rank 0", timeout=600)  # rank 1's failure always comes first
    result = run_all([proc("rank 0", SLEEP, marker), proc("rank 1", "import sys; sys.exit(9)", marker)],
                     timeout=600, grace=5, out=io.StringIO(), master=master)
    assert (result.exit_code, result.failed, result.master_silent) == (9, "rank 1", False)
    assert live_with(marker) == []


# ---------------------------------------------------------------- the report of `run --local`


@pytest.mark.parametrize("others, told", [
    ([], ""),
    ([procs.Ending("rank 0", 143, "SIGTERM", 12.0)], "; the other process ended within 10.0 s: rank 0 was stopped by SIGTERM"),
    ([procs.Ending("rank 0", 1, None, 2.5), procs.Ending("rank 1", 1, None, 2.1), procs.Ending("rank 3", 137, "SIGKILL", 17.0)],
     "; the other 3 processes ended within 15.0 s: rank 0 and rank 1 exited by themselves (code 1); "
     "rank 3 was stopped by SIGKILL"),
    ([procs.Ending("rank %d" % r, 143, "SIGTERM", 3.0) for r in range(1, 8)],
     "; the other 7 processes ended within 1.0 s: rank 1, rank 2, rank 3 and 4 more were stopped by SIGTERM"),
    ([procs.Ending("node 1", 0, None, 2.0), procs.Ending("node 2", 3, None, 2.0)],
     "; the other 2 processes ended within 0.0 s: node 1 had finished (code 0); node 2 exited by itself (code 3)"),
])
def test_the_report_names_how_the_others_ended(others, told):
    from trainspec.local.machinery import _how_the_others_ended

    result = Result(exit_code=137, failed="rank 2", tail=[], timed_out=False, failed_at=2.0, others=others)
    assert _how_the_others_ended(result) == told


def test_the_report_names_the_signal():
    from trainspec.local.machinery import _signal_name

    assert [_signal_name(c) for c in (0, 1, 3, 128, 137, 143, 130, 200)] == [
        "", "", "", "", " (SIGKILL)", " (SIGTERM)", " (SIGINT)", ""]


def test_the_verdict_both_runners_follow():
    """procs.Verdict, shared by run --local and the Ray driver: the first non-zero exit decides
    the code (a signal as 128+n), the others get the grace, a deadline gives 124."""
    import time

    verdict = procs.Verdict(3, grace=60.0, deadline=None)
    assert verdict.budget() is None and not verdict.over
    verdict.ended(1, 0)
    verdict.ended(2, -9)  # killed by SIGKILL: the first failure
    verdict.ended(0, 3)  # a later failure does not change the story
    assert (verdict.over, verdict.failed, verdict.exit_code, verdict.timed_out) == (True, 2, 137, False)

    verdict = procs.Verdict(2, grace=60.0, deadline=None)
    verdict.ended(0, 7)
    assert not verdict.over and 59.0 < verdict.budget() <= 60.0  # the other one gets the grace
    assert (verdict.failed, verdict.exit_code) == (0, 7)

    verdict = procs.Verdict(2, grace=60.0, deadline=time.monotonic())  # the deadline has passed
    assert verdict.over and verdict.timed_out and verdict.exit_code == 124 and verdict.budget() == 0.0
    verdict = procs.Verdict(1, grace=1.0, deadline=None)
    verdict.ended(0, 0)
    assert verdict.over and verdict.exit_code == 0 and not verdict.timed_out


# ---------------------------------------------------------------- torchrun's shutdown messages (issue 30)

# What node 1's torchrun (torch 2.13, per node, 2 nodes) printed after its workers were done, when
# node 0's agent, which hosts the store, had already left the exit barrier: c10d's warning with a
# C++ stack, then the agent's "Error waiting on exit barrier" with a Python one. Exit code 0.
TORCHRUN_SHUTDOWN = """\
[W1204 15:21:49.464200597 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=4, \
addr=[::ffff:127.0.0.1]:32918, remote=[::ffff:127.0.0.1]:29611): Failed to recv, got 0 bytes. Connection was \
likely closed. Did the remote server shutdown or crash?
Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:787 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f7b18979b8d in torch/lib/libc10.so)
frame #5: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::duration<long>) + 0xc5 (0x7f7b0a542d35 in torch/lib/libtorch_cpu.so)
<omitting python frames>
frame #31: _start + 0x21 (0x561af84c9081 in python3)

E1204 15:21:49.247000 12114 torch/distributed/elastic/agent/server/api.py:1008] Error waiting on exit barrier. Elapsed: 0.0326 seconds
E1204 15:21:49.247000 12114 torch/distributed/elastic/agent/server/api.py:1008] Traceback (most recent call last):
E1204 15:21:49.247000 12114 torch/distributed/elastic/agent/server/api.py:1008]   File "torch/distributed/elastic/utils/store.py", line 201, in barrier
E1204 15:21:49.247000 12114 torch/distributed/elastic/agent/server/api.py:1008]     store.wait([last_member_key])
E1204 15:21:49.247000 12114 torch/distributed/elastic/agent/server/api.py:1008] torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?
"""
# torchrun stopped by the runner (a peer failed): the agent's record, then SignalException's stack
TORCHRUN_STOPPED = """\
W1204 15:15:34.478000 8163 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
Traceback (most recent call last):
  File "torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
torch.distributed.elastic.multiprocessing.api.SignalException: Process 8163 got signal: 15
"""
# what a job prints on its own, errors included: never held
ORDINARY = [
    "step 99 loss 1.3624",
    "[W1204 15:17:41.983009673 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
    "Traceback (most recent call last):",
    'RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 60000ms for recv operation',
    "W1204 15:15:23.073000 8160 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 8259 closing signal SIGTERM",
    "Error waiting on exit barrier",  # the words alone, from the user's code: not torchrun's record
]


def test_what_opens_torchruns_shutdown_messages():
    from trainspec.local.machinery import starts_shutdown_noise

    opening = [line for line in TORCHRUN_SHUTDOWN.splitlines() + TORCHRUN_STOPPED.splitlines()
               if starts_shutdown_noise(line)]
    assert [line[:40] for line in opening] == [
        "[W1204 15:21:49.464200597 TCPStore.cpp:1",
        "E1204 15:21:49.247000 12114 torch/distri",
        "W1204 15:15:34.478000 8163 torch/distrib",
    ]
    assert not [line for line in ORDINARY if starts_shutdown_noise(line)]


def _play(tmp_path, marker, node1_exit):
    """Two real processes through run_and_report, as `run --local` runs them: node 1 prints its
    result, then torchrun's shutdown messages, then exits with node1_exit."""
    from trainspec.local.machinery import RunOutput, run_and_report

    node0 = "print('TRAINSPEC_RESULT rank 0', flush=True)"
    node1 = ("import sys\nprint('TRAINSPEC_RESULT rank 1', flush=True)\n"
             f"sys.stdout.write({TORCHRUN_SHUTDOWN!r})\nsys.exit({node1_exit})")
    terminal = io.StringIO()
    with RunOutput(terminal, tmp_path / "run.log") as output:
        code = run_and_report([proc("node 0", node0, marker), proc("node 1", node1, marker)], 600, output)
    return code, terminal.getvalue(), (tmp_path / "run.log").read_text()


def test_a_run_that_succeeds_keeps_torchruns_shutdown_messages_in_its_log(tmp_path, marker, capfd):
    code, shown, log = _play(tmp_path, marker, 0)
    assert code == 0
    assert sorted(shown.splitlines()) == ["[node 0] TRAINSPEC_RESULT rank 0", "[node 1] TRAINSPEC_RESULT rank 1"]
    noise = ["[node 1] " + line for line in TORCHRUN_SHUTDOWN.splitlines()]
    assert [line for line in log.splitlines() if line.startswith("[node 1]")] == \
        ["[node 1] TRAINSPEC_RESULT rank 1", *noise]  # the log has every line, in order
    report = capfd.readouterr().err
    assert "trainspec: all 2 processes exited 0" in report
    assert f"{len(noise)} lines of torchrun's shutdown messages after the work was done" in report
    assert str(tmp_path / "run.log") in report, report


def test_a_run_that_fails_still_shows_torchruns_shutdown_messages(tmp_path, marker, capfd):
    code, shown, log = _play(tmp_path, marker, 3)
    assert code == 3
    noise = ["[node 1] " + line for line in TORCHRUN_SHUTDOWN.splitlines()]
    assert [line for line in shown.splitlines() if line.startswith("[node 1]")] == \
        ["[node 1] TRAINSPEC_RESULT rank 1", *noise]
    assert "Error waiting on exit barrier" in log
    report = capfd.readouterr().err
    assert "node 1 exited with code 3" in report and "shutdown messages" not in report, report
