"""The runtime shim on HPC Pack: one task per node, the master baked in or elected.

The table tests use plain dicts and stay pure (the master is baked in, or the
input fails before any file is touched).  The election tests run the real shim
file in several processes with a temp dir as the "shared directory"; they never
sleep to synchronise, they watch the directory for the files they wait for.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SPECS, kill_processes_with
from trainspec.registry.build import build
import shim_files
from trainspec.runtime import SHIM_PATH, hpcpack_election, shim_platforms, shim_source
from trainspec.runtime.hpcpack_election import ElectionError, elect_master

HPCPACK = shim_files.load("hpcpack")  # the shim an HPC Pack job ships: HPC Pack's detector alone, with torch's own
DETECTORS, ELECTION_FILE, HPCPack = HPCPACK.DETECTORS, HPCPACK.ELECTION_FILE, HPCPACK.HPCPack
Expectation, ShimError, World = HPCPACK.Expectation, HPCPACK.ShimError, HPCPACK.World
detect, normalize, verify = HPCPACK.detect, HPCPACK.normalize, HPCPACK.verify

ELECTION_PATH = Path(hpcpack_election.__file__)
JOB = "1234"


def hpcpack(rank, nodes=3, **extra):
    """One task's variables: the scheduler's CCP_* plus what the compiled job XML sets."""
    env = {
        "CCP_JOBID": JOB,
        "CCP_TASKID": str(rank + 1),
        "CCP_TASKINSTANCEID": "0",
        "CCP_RETRY_COUNT": "0",
        "CCP_NODES": "1 127.0.0.%d 8" % (2 + rank),  # one task per node: each task sees only itself
        "CCP_NUMCPUS": "8",
        "TRAINSPEC_NODES": str(nodes),
        "TRAINSPEC_PROCS_PER_NODE": "4",
        "TRAINSPEC_LAUNCHER": "per-node",
        "TRAINSPEC_MASTER_PORT": "29400",
        "TRAINSPEC_SPEC": "specs/ddp-hpcpack.yaml",
        "TRAINSPEC_NODE_RANK": str(rank),
    }
    return {**env, **extra}


def baked(rank, nodes=3, **extra):
    return hpcpack(rank, nodes, TRAINSPEC_MASTER_ADDR="NODE00", **extra)


# ---------------------------------------------------------------- pure: world, verify, exports

#                     platform, master_addr, master_port, world_size, rank, local_rank, local_world_size, node_rank, nodes
WORLD_CASES = [
    pytest.param(baked(0), World("hpcpack", "NODE00", 29400, 3, 0, 0, 1, 0, 3), id="node-0"),
    pytest.param(baked(2), World("hpcpack", "NODE00", 29400, 3, 2, 0, 1, 2, 3), id="node-2"),
    pytest.param(baked(1, TRAINSPEC_MASTER_PORT=""), World("hpcpack", "NODE00", 29400, 3, 1, 0, 1, 1, 3),
                 id="default-port"),
    pytest.param(baked(1, TRAINSPEC_MASTER_PORT="7000"), World("hpcpack", "NODE00", 7000, 3, 1, 0, 1, 1, 3),
                 id="spec-port"),
    pytest.param(hpcpack(0, nodes=1), World("hpcpack", "127.0.0.1", 29400, 1, 0, 0, 1, 0, 1),
                 id="one-node-nothing-to-elect"),
    pytest.param(baked(1, TRAINSPEC_LAUNCHER="per-process", TRAINSPEC_PROCS_PER_NODE="1"),
                 World("hpcpack", "NODE00", 29400, 3, 1, 0, 1, 1, 3), id="one-process-per-node-per-process"),
]


@pytest.mark.parametrize("env, expected", WORLD_CASES)
def test_world_from_hpcpack_env(env, expected):
    assert normalize(dict(env), apply=False) == expected


def test_world_is_pure_and_check_accepts_it():
    env = baked(2)
    world = HPCPack.world(env, Expectation.from_env(env))
    verify(world, Expectation.from_env(env))  # 3 launchers, 1 per node, per-node spec: accepted
    assert world.master_addr == "NODE00"


def test_unelected_world_leaves_the_master_to_rendezvous(tmp_path):
    env = hpcpack(1, TRAINSPEC_RDZV_DIR=str(tmp_path))
    world = HPCPack.world(env, Expectation.from_env(env))
    assert (world.master_addr, world.node_rank, world.nodes) == ("", 1, 3)
    assert list(tmp_path.iterdir()) == []  # world() touched nothing


ERROR_CASES = [
    pytest.param({k: v for k, v in baked(1).items() if k != "TRAINSPEC_NODE_RANK"},
                 ["TRAINSPEC_NODE_RANK is not set", "not compiled by trainspec or was edited"], id="no-node-rank"),
    pytest.param(baked(1, TRAINSPEC_NODE_RANK="one"),
                 ["TRAINSPEC_NODE_RANK='one'", "not compiled by trainspec or was edited"], id="garbled-node-rank"),
    pytest.param(baked(1, TRAINSPEC_NODE_RANK="-1"), ["TRAINSPEC_NODE_RANK=-1"], id="negative-node-rank"),
    pytest.param({k: v for k, v in baked(1).items() if k != "TRAINSPEC_NODES"},
                 ["TRAINSPEC_NODES is not set"], id="no-nodes"),
    pytest.param(baked(3), ["TRAINSPEC_NODE_RANK=3", "TRAINSPEC_NODES=3", "0 to 2"], id="node-rank-too-big"),
    pytest.param(baked(5, nodes=2), ["TRAINSPEC_NODE_RANK=5", "TRAINSPEC_NODES=2"], id="node-rank-way-too-big"),
    pytest.param(hpcpack(1), ["TRAINSPEC_MASTER_ADDR", "TRAINSPEC_RDZV_DIR"], id="no-master-no-rdzv-dir"),
    pytest.param(hpcpack(1, TRAINSPEC_RDZV_DIR="/nonexistent/never-touched", CCP_JOBID="../x"),
                 ["CCP_JOBID='../x'"], id="job-id-not-a-path-component"),
    pytest.param(hpcpack(1, TRAINSPEC_RDZV_DIR="/nonexistent/never-touched", TRAINSPEC_RDZV_TIMEOUT="soon"),
                 ["TRAINSPEC_RDZV_TIMEOUT='soon'"], id="garbled-timeout"),
    pytest.param(hpcpack(1, TRAINSPEC_RDZV_DIR="/nonexistent/never-touched", TRAINSPEC_RDZV_TIMEOUT="0"),
                 ["TRAINSPEC_RDZV_TIMEOUT=0 must be at least 1 (whole seconds)"], id="zero-timeout"),
    pytest.param(baked(0, TRAINSPEC_LAUNCHER="per-process"),
                 ["3 processes (TRAINSPEC_NODES=3)", "12", "resources.procs_per_node (4)"],
                 id="per-process-spec-but-one-task-per-node"),
]


@pytest.mark.parametrize("env, fragments", ERROR_CASES)
def test_errors_name_the_variables(env, fragments):
    with pytest.raises(ShimError) as caught:
        normalize(dict(env), apply=False)
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)
    assert not Path("/nonexistent").exists()


def test_per_node_exports_for_a_bare_torchrun():
    env = baked(2, RANK="7", LOCAL_RANK="3", WORLD_SIZE="12", LOCAL_WORLD_SIZE="4")  # stale: must go
    normalize(env)
    exported = {k: v for k, v in env.items() if k.startswith(("PET_", "MASTER_", "NODE_", "GROUP_"))}
    assert exported == {
        "MASTER_ADDR": "NODE00", "MASTER_PORT": "29400", "NODE_RANK": "2", "GROUP_RANK": "2",
        "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "NODE00", "PET_MASTER_PORT": "29400",
    }
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "PET_MAX_RESTARTS"} & set(env)


def test_no_nproc_per_node_export_when_the_spec_gives_none():
    env = {k: v for k, v in baked(1).items() if k != "TRAINSPEC_PROCS_PER_NODE"}
    normalize(env)
    assert env["PET_NNODES"] == "3" and "PET_NPROC_PER_NODE" not in env


def test_per_process_exports_no_torchrun_variables():
    env = baked(1, TRAINSPEC_LAUNCHER="per-process", TRAINSPEC_PROCS_PER_NODE="1")
    normalize(env)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "3", "0")
    assert not [k for k in env if k.startswith("PET_")]


def test_azureml_per_node_gets_the_same_torchrun_defaults():
    env = {"AZUREML_RUN_ID": "run-1", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "2",
           "RANK": "1", "NODE_RANK": "1", "LOCAL_WORLD_SIZE": "1", "TRAINSPEC_LAUNCHER": "per-node",
           "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "8"}
    normalize(env)
    assert {k: env[k] for k in env if k.startswith("PET_")} == {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.4",
        "PET_MASTER_PORT": "6105"}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_torchrun_reads_pet_defaults_and_explicit_flags_win():
    """Against the installed torch: bare flags come from PET_*, flags on the command line win."""
    code = ("import json, sys; from torch.distributed.run import parse_args; "
            "a = parse_args(sys.argv[1:]); "
            "print(json.dumps([a.nnodes, a.nproc_per_node, a.node_rank, a.master_addr, a.master_port, "
            "a.rdzv_backend, a.max_restarts]))")
    env = {**os.environ, "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "2",
           "PET_MASTER_ADDR": "NODE00", "PET_MASTER_PORT": "29400"}
    env.pop("PET_MAX_RESTARTS", None)
    env.pop("PET_RDZV_BACKEND", None)

    def parsed(*args):
        done = subprocess.run([sys.executable, "-c", code, *args, "train.py"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    assert parsed() == ["3", "4", 2, "NODE00", 29400, "static", 0]  # max_restarts defaults to 0 by itself
    assert parsed("--nnodes", "2", "--nproc_per_node", "8", "--node_rank", "1", "--master_addr", "10.0.0.4",
                  "--master_port", "6105") == ["2", "8", 1, "10.0.0.4", 6105, "static", 0]


def test_detector_order():
    names = [d.name for d in DETECTORS]
    assert names == ["torchelastic", "hpcpack", "env", "single-process"]  # an HPC Pack job's shim: no other platform's
    # A torchrun worker inside an HPC Pack task: torchrun's variables win.
    worker = {**baked(1), "TORCHELASTIC_RUN_ID": "1234", "MASTER_ADDR": "NODE00", "MASTER_PORT": "29400",
              "WORLD_SIZE": "12", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
              "GROUP_WORLD_SIZE": "3"}
    detector, world = detect(worker)
    assert detector.name == "torchelastic" and (world.rank, world.world_size) == (5, 12)
    assert detect(baked(1))[0] is HPCPack


# ---------------------------------------------------------------- the election, in-process


def elect_in_threads(tmp_path, nodes, attempt="7", identity="id", timeout=60):
    """Every node of a job electing at once, each in a thread: rank -> host or ElectionError."""
    import threading

    results = {}

    def node(rank):
        try:
            results[rank] = elect_master(str(tmp_path), attempt, rank, nodes, "NODE%02d" % rank, timeout, identity)
        except ElectionError as error:
            results[rank] = error

    threads = [threading.Thread(target=node, args=(rank,)) for rank in range(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_every_node_agrees_and_node_0_waits_for_every_acknowledgement(tmp_path):
    assert elect_in_threads(tmp_path, 3) == {0: "NODE00", 1: "NODE00", 2: "NODE00"}
    attempt = tmp_path / "7"
    assert sorted(p.name for p in attempt.iterdir()) == ["ack-1", "ack-2", "go", "master", "node-0", "node-1",
                                                          "node-2"]  # no temp file left
    host, identity, nonce = (attempt / "master").read_text().splitlines()
    assert (host, identity) == ("NODE00", "id") and len(nonce) == 16
    acks = [(attempt / ("ack-%d" % r)).read_text().splitlines() for r in (1, 2)]
    assert [ack[0] for ack in acks] == [nonce, nonce]  # each follower acknowledged this claim ...
    assert (attempt / "go").read_text().splitlines() == [nonce, "1 %s" % acks[0][1], "2 %s" % acks[1][1]]


def test_node_0_alone_times_out_naming_who_never_acknowledged(tmp_path):
    with pytest.raises(ElectionError) as caught:
        elect_master(str(tmp_path), "7", 0, 3, "NODE00", timeout=0.3, identity="id")
    assert str(caught.value) == ("node(s) 1, 2 did not acknowledge node 0 (NODE00) within 0.3 s "
                                 "(TRAINSPEC_RDZV_TIMEOUT); registered: node-0 -- are their tasks queued or failed?")


def test_modes_suit_a_shared_directory(tmp_path):
    old = os.umask(0o022)
    try:
        elect_in_threads(tmp_path, 2)
    finally:
        os.umask(old)
    attempt = tmp_path / "7"
    assert attempt.stat().st_mode & 0o777 == 0o755
    assert {(attempt / n).stat().st_mode & 0o777 for n in ("master", "node-0", "ack-1", "go")} == {0o644}


def write_master(directory, host, identity, age=0.0, nonce="0123456789abcdef"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "master").write_text("%s\n%s\n%s\n" % (host, identity, nonce))
    if age:
        then = time.time() - age
        os.utime(directory / "master", (then, then))
        os.utime(directory, (then, then))


def test_master_of_another_run_in_the_same_directory_is_ignored(tmp_path):
    """A reused job id (reinstalled cluster, two clusters on one share) leaves a master of another spec."""
    write_master(tmp_path / "7", "OLDNODE", "job=7 nodes=3 port=29400 spec=specs/other.yaml")
    with pytest.raises(ElectionError) as caught:
        elect_master(str(tmp_path), "7", 1, 3, "NODE01", timeout=0.3,
                     identity="job=7 nodes=3 port=29400 spec=specs/mine.yaml")
    assert "names OLDNODE but is from another run (job=7 nodes=3 port=29400 spec=specs/other.yaml)" \
        in str(caught.value)


def test_a_master_file_of_the_same_run_identity_is_not_trusted_until_confirmed(tmp_path):
    """A re-run whose CCP_RETRY_COUNT did not change: the previous attempt's master (same identity, its
    go file too) is acknowledged but never confirmed, so the follower does not take it."""
    write_master(tmp_path / "7", "OLDNODE", "id")
    (tmp_path / "7" / "go").write_text("0123456789abcdef\n1 feedfacefeedface\n")
    with pytest.raises(ElectionError) as caught:
        elect_master(str(tmp_path), "7", 1, 2, "NODE01", timeout=0.3, identity="id")
    assert ("node 0 (OLDNODE) never confirmed this node in %s: that claim is not of this run" % (tmp_path / "7")
            in str(caught.value))


def test_node_0_registered_but_no_master(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "node-0").write_text("NODE00\n")
    with pytest.raises(ElectionError, match=r"node 0 registered but never wrote .*/7/master within 0\.2 s"):
        elect_master(str(tmp_path), "7", 2, 3, "NODE02", timeout=0.2)


def test_node_0_removes_idle_job_folders_only(tmp_path):
    write_master(tmp_path / "5", "NODE05", "idle", age=2 * 86400)         # another job, idle: removed
    write_master(tmp_path / "6", "NODE06", "running")                     # another job, recent: kept
    write_master(tmp_path / "4", "NODE04", "idle, foreign", age=2 * 86400)
    (tmp_path / "4" / "notes.txt").write_text("not ours")                 # foreign file: whole folder kept
    (tmp_path / "README").write_text("not a job folder")
    elect_master(str(tmp_path), "7", 0, 1, "NODE00", timeout=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4", "6", "7", "README"]
    assert sorted(p.name for p in (tmp_path / "4").iterdir()) == ["master", "notes.txt"]


def test_unwritable_rendezvous_directory_is_an_election_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ElectionError, match="cannot register node 1 in the rendezvous directory .*file/7"):
        elect_master(str(tmp_path / "file"), "7", 1, 2, "NODE01", timeout=1)


# ---------------------------------------------------------------- the election, real processes


def ship(folder, election=True):
    """The shim (and its election) as an HPC Pack job ships them: one folder, the shipped names."""
    shim = shim_files.ship("hpcpack", folder)
    if election:
        shutil.copyfile(ELECTION_PATH, folder / ELECTION_FILE)
    return shim


@pytest.fixture
def spawn(tmp_path_factory):
    """Start shipped shims as the task runs them (python -I -S trainspec_shim.py); every process
    started is killed when the test ends, whatever happens."""
    started = []
    shim = ship(tmp_path_factory.mktemp("job"))

    def start(env, args=("--print",), shim=shim, **popen):
        full_env = {"PATH": os.environ["PATH"], **env}
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(shim), *args], env=full_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()  # the shim execs nothing in these tests but python -c: no grandchildren
            proc.communicate()


def finish(proc, timeout=300):  # a hang guard: these shims end in well under a second
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, dict(line.split("=", 1) for line in out.splitlines()), err


def wait_for(paths, procs, timeout=300):
    """Watch the directory until every path exists; fail at once if a process ends meanwhile."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        for proc in procs:
            assert proc.poll() is None, "exited early: %s" % (proc.communicate(),)
        assert time.monotonic() < deadline, "never appeared: %s" % [str(p) for p in paths if not p.exists()]
        time.sleep(0.02)


def assert_agree(results, master="127.0.0.2"):
    for rank, (code, exported, err) in enumerate(results):
        assert code == 0, err
        assert exported["MASTER_ADDR"] == exported["PET_MASTER_ADDR"] == master
        assert exported["NODE_RANK"] == exported["PET_NODE_RANK"] == str(rank)
        assert (exported["PET_NNODES"], exported["PET_NPROC_PER_NODE"], exported["MASTER_PORT"]) == (
            "3", "4", "29400")


def test_three_nodes_elect_node_0(tmp_path, spawn):
    procs = [spawn(hpcpack(rank, TRAINSPEC_RDZV_DIR=str(tmp_path))) for rank in range(3)]
    results = [finish(proc) for proc in procs]
    assert_agree(results)
    assert results[0][2] == ("trainspec: hpcpack detected; world 12 = 3 node(s) x 4 process(es) [per-node]; "
                             "master 127.0.0.2:29400\n")
    assert results[1][2] == results[2][2] == ""
    attempt = tmp_path / (JOB)
    assert sorted(p.name for p in attempt.iterdir()) == ["ack-1", "ack-2", "go", "master", "node-0", "node-1",
                                                          "node-2"]
    assert [(attempt / ("node-%d" % r)).read_text() for r in range(3)] == ["127.0.0.%d\n" % (2 + r) for r in range(3)]


def test_node_0_starting_late(tmp_path, spawn):
    attempt = tmp_path / (JOB)
    followers = [spawn(hpcpack(rank, TRAINSPEC_RDZV_DIR=str(tmp_path))) for rank in (1, 2)]
    wait_for([attempt / "node-1", attempt / "node-2"], followers)
    assert not (attempt / "master").exists()
    assert all(proc.poll() is None for proc in followers)  # still waiting for node 0
    leader = spawn(hpcpack(0, TRAINSPEC_RDZV_DIR=str(tmp_path)))
    assert_agree([finish(leader), *(finish(proc) for proc in followers)])


def test_earlier_job_left_in_the_directory_is_ignored(tmp_path, spawn):
    write_master(tmp_path / "1000", "127.0.0.99", "job=1000 nodes=3 port=29400 spec=specs/ddp-hpcpack.yaml")
    procs = [spawn(hpcpack(rank, TRAINSPEC_RDZV_DIR=str(tmp_path))) for rank in (1, 2, 0)]
    results = [finish(proc) for proc in procs]
    assert_agree([results[2], results[0], results[1]])
    assert (tmp_path / "1000" / "master").exists()  # a recent folder of another job is left alone


def test_a_retry_uses_the_new_master_whatever_its_retry_count(tmp_path, spawn):
    """HPC Pack requeue/retry: same CCP_JOBID, CCP_RETRY_COUNT=1, the job's folder still holds attempt
    0's files naming other hosts; and tasks of one run need not agree on CCP_RETRY_COUNT at all."""
    old = tmp_path / JOB
    write_master(old, "127.0.0.99", "job=%s nodes=3 port=29400 spec=specs/ddp-hpcpack.yaml" % JOB)
    for rank in range(3):
        (old / ("node-%d" % rank)).write_text("127.0.0.%d\n" % (97 + rank))
    followers = [spawn(hpcpack(rank, TRAINSPEC_RDZV_DIR=str(tmp_path), CCP_RETRY_COUNT=str(rank))) for rank in (1, 2)]
    wait_for([old / "ack-1", old / "ack-2"], followers)  # the stale claim, acknowledged but never confirmed
    assert all(proc.poll() is None for proc in followers)
    leader = spawn(hpcpack(0, TRAINSPEC_RDZV_DIR=str(tmp_path), CCP_RETRY_COUNT="1"))
    assert_agree([finish(leader), *(finish(proc) for proc in followers)])


def test_a_rerun_that_keeps_the_retry_count_waits_for_its_own_node_0(tmp_path, spawn):
    """Whether HPC Pack raises CCP_RETRY_COUNT when it re-runs a whole job is not documented. If it
    does not, the attempt directory still holds the previous run's master (same identity, recent, its
    go file too), naming a host no longer in the job: the followers that start first must not take it."""
    old = tmp_path / (JOB)
    write_master(old, "127.0.0.99", "job=%s nodes=3 port=29400 spec=specs/ddp-hpcpack.yaml" % JOB)
    (old / "go").write_text("0123456789abcdef\n1 aaaaaaaaaaaaaaaa\n2 bbbbbbbbbbbbbbbb\n")
    followers = [spawn(hpcpack(rank, TRAINSPEC_RDZV_DIR=str(tmp_path))) for rank in (1, 2)]
    wait_for([old / "ack-1", old / "ack-2"], followers)  # they acknowledged the stale claim ...
    assert all(proc.poll() is None for proc in followers)  # ... and wait for a confirmation that cannot come
    leader = spawn(hpcpack(0, TRAINSPEC_RDZV_DIR=str(tmp_path)))
    assert_agree([finish(leader), *(finish(proc) for proc in followers)])  # all on the new node 0


def test_two_nodes_claiming_node_rank_0_both_fail_at_once_naming_both_hosts(tmp_path, spawn):
    """Before: the second claimer warned "replacing" and both halves hung until torch's timeout."""
    attempt = tmp_path / (JOB)
    first = spawn(hpcpack(0, TRAINSPEC_RDZV_DIR=str(tmp_path), TRAINSPEC_RDZV_TIMEOUT="600"))
    wait_for([attempt / "master"], [first])  # waiting for nodes 1 and 2 to acknowledge it
    second = spawn(hpcpack(0, TRAINSPEC_RDZV_DIR=str(tmp_path), TRAINSPEC_RDZV_TIMEOUT="600",
                           CCP_NODES="1 127.0.0.9 4"))
    started = time.monotonic()
    results = [finish(proc) for proc in (first, second)]
    assert time.monotonic() - started < 60  # at once: a few polls, not the 600 s rendezvous timeout
    for code, exported, err in results:
        assert (code, exported) == (3, {}), err
        assert "two nodes claim node rank 0 of this job: " in err and "127.0.0.2" in err and "127.0.0.9" in err, err


def test_node_0_never_comes(tmp_path, spawn):
    proc = spawn(hpcpack(1, TRAINSPEC_RDZV_DIR=str(tmp_path), TRAINSPEC_RDZV_TIMEOUT="1"))
    code, exported, err = finish(proc)  # the shim's own clock bounds the wait: the message says "within 1 s"
    assert (code, exported) == (3, {})
    assert err == ("trainspec: error: node 0 never registered in %s within 1 s (TRAINSPEC_RDZV_TIMEOUT); "
                   "registered: node-1 -- is task 0 queued or failed?\n" % (tmp_path / JOB))


def test_the_command_gets_the_elected_master(tmp_path, spawn):
    code = "import os; print('MASTER=' + os.environ['MASTER_ADDR'] + ' ' + os.environ['PET_NODE_RANK'])"
    procs = [spawn(hpcpack(rank, nodes=2, TRAINSPEC_RDZV_DIR=str(tmp_path)), args=("--", sys.executable, "-c", code))
             for rank in range(2)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [out for out, _ in outs] == ["MASTER=127.0.0.2 0\n", "MASTER=127.0.0.2 1\n"]


def test_a_shim_shipped_without_its_election_says_so_and_touches_nothing(tmp_path, spawn):
    """The election is loaded only when a master must be elected: a job that names its master runs
    without the file; one that elects fails at once, naming the file, before any waiting."""
    shim = ship(tmp_path / "job", election=False)
    code, exported, err = finish(spawn(baked(1), shim=shim))
    assert (code, exported["MASTER_ADDR"]) == (0, "NODE00"), err
    rdzv = tmp_path / "rdzv"
    rdzv.mkdir()
    code, exported, err = finish(spawn(hpcpack(1, TRAINSPEC_RDZV_DIR=str(rdzv)), shim=shim))
    assert (code, exported) == (3, {})
    assert err.startswith("trainspec: error: trainspec_hpcpack_election.py is missing beside %s: this HPC Pack "
                          "job elects its master through TRAINSPEC_RDZV_DIR" % shim), err
    assert "Traceback" not in err and list(rdzv.iterdir()) == []


def test_inside_the_package_the_shim_loads_the_election_source_beside_it():
    from trainspec.runtime import hpcpack_detector

    assert Path(hpcpack_detector._election().__file__) == ELECTION_PATH


def platform_classes(platform):
    """The names of the detector classes ``<platform>_detector.py`` defines."""
    import re

    return re.findall(r"^class (\w+)\(Detector\):", (SHIM_PATH.parent / f"{platform}_detector.py").read_text(), re.M)


def test_the_shim_core_stays_small():
    """Issue 42: the core every job ships is at most 400 lines; the rest is joined in per job."""
    assert len(SHIM_PATH.read_text().splitlines()) <= 400


def test_the_election_ships_with_hpcpack_jobs_only_and_each_job_ships_its_platforms_detectors_only(monkeypatch):
    """Every example spec, every target: the shim as shipped is the core joined with the target's
    detectors, and no other platform's (an Azure ML job carries no Slurm or HPC Pack code); the
    election file beside it only in HPC Pack jobs, whose stage.sh copies it next to the shim."""
    monkeypatch.chdir(REPO)
    targets = set()
    for spec in sorted(SPECS.glob("*.yaml")):
        outcome = build(str(spec.relative_to(REPO)), Path("build"))
        for artifact in outcome.artifacts:
            names = {item.path for item in artifact.files}
            targets.add(artifact.target)
            if artifact.target == "kubernetes":  # the shim travels in job.yaml's first document, a ConfigMap
                import yaml

                shim = next(yaml.safe_load_all(artifact.file("job.yaml").data))["data"]["trainspec_shim.py"]
            else:
                shim = artifact.file("trainspec_shim.py").data.decode()
            assert shim == shim_source(artifact.target)
            assert all(f"class {name}(Detector):" in shim for name in platform_classes(artifact.target))
            others = [name for platform in shim_platforms() if platform != artifact.target
                      for name in platform_classes(platform) if f"class {name}(" in shim]
            assert others == [], (spec.name, artifact.target, others)
            assert (ELECTION_FILE in names) == (artifact.target == "hpcpack"), (spec.name, artifact.target)
            if artifact.target == "hpcpack":
                assert artifact.file(ELECTION_FILE).data == ELECTION_PATH.read_bytes()
                stage = artifact.file("stage.sh").data.decode()
                assert "cp %s \"$staging\"/%s\n" % (ELECTION_FILE, ELECTION_FILE) in stage
    assert set(shim_platforms()) <= targets


# ---------------------------------------------------------------- torchrun honours the exports


def _in_loopback_namespace(argv):
    """Run argv in a network namespace with only loopback (root), else as is (still loopback only)."""
    if os.geteuid() == 0 and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    return argv


DRIVER = r"""
import json, os, subprocess, sys
shim, rdzv, port, train = sys.argv[1:5]
procs = []
try:
    for rank in range(2):
        env = dict(os.environ, CCP_JOBID="77", CCP_RETRY_COUNT="0", CCP_NODES="1 127.0.0.%d 2" % (2 + rank),
                   TRAINSPEC_NODES="2", TRAINSPEC_PROCS_PER_NODE="2", TRAINSPEC_LAUNCHER="per-node",
                   TRAINSPEC_MASTER_PORT=port, TRAINSPEC_NODE_RANK=str(rank), TRAINSPEC_RDZV_DIR=rdzv,
                   GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        argv = [sys.executable, shim, "--", sys.executable, "-m", "torch.distributed.run", train, "--steps", "2",
                "--timeout", "300"]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=500)[0] for p in procs]
    print(json.dumps({"codes": [p.returncode for p in procs], "outs": outs}))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
"""


@pytest.mark.realproc
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_torchrun_without_flags_trains_on_two_simulated_nodes(tmp_path):
    from trainspec.runtime.procs import free_port

    marker = "hpcpack-%d-%d" % (os.getpid(), time.monotonic_ns())
    argv = [sys.executable, "-c", DRIVER, str(ship(tmp_path / "job")), str(tmp_path / "rdzv"), str(free_port()),
            str(REPO / "examples" / "ddp" / "train.py")]
    env = {**os.environ, "TRAINSPEC_TEST_MARKER": marker}
    for name in [k for k in env if k.startswith(("PET_", "TORCHELASTIC_", "CCP_", "TRAINSPEC_"))]:
        if name != "TRAINSPEC_TEST_MARKER":
            del env[name]
    driver = subprocess.Popen(_in_loopback_namespace(argv), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = driver.communicate(timeout=550)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
        kill_processes_with("TRAINSPEC_TEST_MARKER=%s" % marker)
    assert driver.returncode == 0, err
    done = json.loads(out.splitlines()[-1])
    assert done["codes"] == [0, 0], done["outs"]
    results = [json.loads(line.split(" ", 1)[1]) for text in done["outs"] for line in text.splitlines()
               if line.startswith("TRAINSPEC_RESULT ")]
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert {r["allreduce"] for r in results} == {4}
    assert {r["master"].rsplit(":", 1)[0] for r in results} == {"127.0.0.2"}
    assert sorted((r["rank"], r["node_rank"]) for r in results) == [(0, 0), (1, 0), (2, 1), (3, 1)]
