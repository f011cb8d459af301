"""The runtime shim: platform variables in, World and exported variables out.

Most tests call the pure functions with plain dicts, on the shim an Azure ML job ships (its
detectors and torch's own, no other platform's: shim_files.load); Kubeflow's on a Kubernetes
job's. The last ones run the real file in a subprocess, as a compiled job does.
"""

import os
import shutil
import subprocess
import sys

import pytest

import shim_files

AZUREML = shim_files.load("azureml")  # Azure ML's detectors alone, with torch's own
KUBERNETES = shim_files.load("kubernetes")  # Kubeflow's alone
DETECTORS, Expectation, ShimError, World = AZUREML.DETECTORS, AZUREML.Expectation, AZUREML.ShimError, AZUREML.World
detect, normalize, verify = AZUREML.detect, AZUREML.normalize, AZUREML.verify


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shim file an Azure ML job ships."""
    return shim_files.ship("azureml", tmp_path_factory.mktemp("azureml"))


def azureml_pytorch(rank, nodes=2, procs=4):
    return {
        "AZUREML_RUN_ID": "run-1",
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": "6105",
        "WORLD_SIZE": str(nodes * procs),
        "NODE_RANK": str(rank // procs),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % procs),
    }


def azureml_mpi(rank, nodes=2, procs=4, **extra):
    env = {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(nodes * procs),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % procs),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(procs),
        "OMPI_COMM_WORLD_NODE_RANK": "0",  # not a node index: must be ignored
        "AZUREML_RUN_ID": "run-1",
        "RANK": "ignored-by-mpi",  # stale torch variables must not confuse detection
    }
    if nodes > 1:
        env["AZ_BATCH_MASTER_NODE"] = "10.0.0.4:6000"
    return {**env, **extra}


def torchrun(rank, nodes=2, procs=2):
    return {
        "TORCHELASTIC_RUN_ID": "none",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": str(nodes * procs),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % procs),
        "LOCAL_WORLD_SIZE": str(procs),
        "GROUP_RANK": str(rank // procs),
        "GROUP_WORLD_SIZE": str(nodes),
    }


def tf_config(index):
    return {
        "TF_CONFIG": '{"cluster":{"worker":["host0:2222","host1:2222","host2:2222"]},'
        '"task":{"type":"worker","index":%d},"environment":"cloud"}' % index
    }


#                     platform, master_addr, master_port, world_size, rank, local_rank, local_world_size, node_rank, nodes
WORLD_CASES = [
    pytest.param(
        azureml_pytorch(0),
        World("azureml-pytorch", "10.0.0.4", 6105, 8, 0, 0, 8, 0, 1),
        id="azureml-pytorch-no-local-world-size-no-spec",
    ),
    pytest.param(
        {**azureml_pytorch(0), "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4"},
        World("azureml-pytorch", "10.0.0.4", 6105, 8, 0, 0, 4, 0, 2),
        id="azureml-pytorch-2x4-rank0",
    ),
    pytest.param(
        {**azureml_pytorch(5), "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4"},
        World("azureml-pytorch", "10.0.0.4", 6105, 8, 5, 1, 4, 1, 2),
        id="azureml-pytorch-2x4-rank5",
    ),
    pytest.param(
        {**azureml_pytorch(7), "LOCAL_WORLD_SIZE": "4"},
        World("azureml-pytorch", "10.0.0.4", 6105, 8, 7, 3, 4, 1, 2),
        id="azureml-pytorch-2x4-last-rank",
    ),
    pytest.param(
        azureml_mpi(6),
        World("azureml-mpi", "10.0.0.4", 6105, 8, 6, 2, 4, 1, 2),
        id="mpi-multi-node-default-port",
    ),
    pytest.param(
        azureml_mpi(3, TRAINSPEC_MASTER_PORT="29400"),
        World("azureml-mpi", "10.0.0.4", 29400, 8, 3, 3, 4, 0, 2),
        id="mpi-multi-node-trainspec-port",
    ),
    pytest.param(
        azureml_mpi(2, nodes=1, AZ_BATCHAI_MPI_MASTER_NODE="10.0.0.9"),
        World("azureml-mpi", "10.0.0.9", 6105, 4, 2, 2, 4, 0, 1),
        id="mpi-single-node",
    ),
    pytest.param(
        azureml_mpi(1, nodes=1),
        World("azureml-mpi", "127.0.0.1", 6105, 4, 1, 1, 4, 0, 1),
        id="mpi-single-node-no-address",
    ),
    pytest.param(
        torchrun(3),
        World("torchelastic", "node0", 29500, 4, 3, 1, 2, 1, 2),
        id="torchrun",
    ),
    pytest.param(
        {**torchrun(3), "TRAINSPEC_LAUNCHER": "per-node", "TRAINSPEC_NODES": "2",
         "TRAINSPEC_PROCS_PER_NODE": "2", "TRAINSPEC_MASTER_PORT": "7000"},
        World("torchelastic", "node0", 29500, 4, 3, 1, 2, 1, 2),
        id="torchrun-under-per-node-spec-keeps-its-port",
    ),
    pytest.param(
        tf_config(2),
        World("tensorflow", "host0", 2222, 3, 2, 0, 1, 2, 3),
        id="tf-config",
    ),
    pytest.param(
        {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.2", "MASTER_PORT": "4000",
         "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0"},
        World("env", "127.0.0.2", 4000, 4, 1, 1, 2, 0, 2),
        id="env-vars",
    ),
    pytest.param(
        {"MASTER_PORT": "4321", "AZUREML_RUN_ID": "run-1"},
        World("single-process", "127.0.0.1", 4321, 1, 0, 0, 1, 0, 1),
        id="single-process",
    ),
]


@pytest.mark.parametrize("env, expected", WORLD_CASES)
def test_world_from_platform_env(env, expected):
    assert normalize(dict(env), apply=False) == expected


def test_single_process_without_port_picks_one():
    world = normalize({}, apply=False)
    assert (world.platform, world.world_size, world.master_addr) == ("single-process", 1, "127.0.0.1")
    assert 0 < world.master_port < 65536


def test_detector_order_and_names():
    assert [d.name for d in DETECTORS] == [
        "torchelastic", "azureml-mpi", "azureml-pytorch", "tensorflow", "env", "single-process"]
    detector, _ = detect({**azureml_mpi(0), **torchrun(0)})
    assert detector.name == "torchelastic"


def test_mpi_never_uses_the_azure_batch_port():
    env = azureml_mpi(0)
    normalize(env)
    assert env["MASTER_ADDR"] == "10.0.0.4"
    assert env["MASTER_PORT"] == "6105"


def test_mpi_round_robin_placement_is_refused():
    env = azureml_mpi(1, OMPI_COMM_WORLD_LOCAL_RANK="0")  # rank 1 on node 1: --map-by node
    with pytest.raises(ShimError, match="round-robin"):
        normalize(env)


def test_mpi_multi_node_without_address_is_refused():
    env = azureml_mpi(5)
    del env["AZ_BATCH_MASTER_NODE"]
    with pytest.raises(ShimError, match="AZ_BATCH_MASTER_NODE"):
        normalize(env)


def test_per_process_exports():
    env = {**azureml_pytorch(5), "TRAINSPEC_LAUNCHER": "per-process", "TRAINSPEC_NODES": "2",
           "TRAINSPEC_PROCS_PER_NODE": "4"}
    normalize(env)
    exported = {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")}
    assert exported == {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "8", "RANK": "5",
                        "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "1", "GROUP_RANK": "1"}


def test_per_node_export_unsets_worker_variables():
    # Azure ML pytorch with one process per node that runs torchrun / Lightning spawn.
    env = {**azureml_pytorch(1, nodes=2, procs=1), "TRAINSPEC_LAUNCHER": "per-node",
           "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4", "LOCAL_WORLD_SIZE": "1"}
    world = normalize(env)
    assert (world.node_rank, world.nodes) == (1, 2)
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        assert name not in env
    assert (env["NODE_RANK"], env["GROUP_RANK"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
        "1", "1", "10.0.0.4", "6105")


def test_per_node_mpi_one_launcher_per_node():
    env = azureml_mpi(1, nodes=2, procs=1, TRAINSPEC_LAUNCHER="per-node", TRAINSPEC_NODES="2",
                      TRAINSPEC_PROCS_PER_NODE="8")
    world = normalize(env)
    assert (world.rank, world.node_rank, world.local_world_size) == (1, 1, 1)
    assert "LOCAL_RANK" not in env and env["NODE_RANK"] == "1"


def test_shim_inside_torchrun_changes_nothing():
    env = {**torchrun(3), "TRAINSPEC_LAUNCHER": "per-node", "TRAINSPEC_NODES": "2",
           "TRAINSPEC_PROCS_PER_NODE": "2", "TRAINSPEC_MASTER_PORT": "7000"}
    before = dict(env)
    normalize(env)
    assert {k: env[k] for k in before} == before
    assert set(env) - set(before) == {"NODE_RANK"}
    assert env["NODE_RANK"] == env["GROUP_RANK"]


def test_every_rank_of_a_3x4_mpi_world():
    ranks = []
    for rank in range(12):
        env = azureml_mpi(rank, nodes=3, procs=4, TRAINSPEC_NODES="3", TRAINSPEC_PROCS_PER_NODE="4",
                          TRAINSPEC_LAUNCHER="mpi")
        normalize(env)
        ranks.append(int(env["RANK"]))
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(rank // 4)
        assert int(env["RANK"]) == int(env["NODE_RANK"]) * 4 + int(env["LOCAL_RANK"])
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
            "12", "4", "10.0.0.4", "6105")
    assert ranks == list(range(12))


# ---------------------------------------------------------------- mismatches


MISMATCH_CASES = [
    pytest.param(
        {**azureml_pytorch(0, nodes=1, procs=4), "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4"},
        ["4", "8", "WORLD_SIZE=4", "resources.nodes (2)", "resources.procs_per_node (4)"],
        id="world-size",
    ),
    pytest.param(
        azureml_mpi(0, nodes=2, procs=4, TRAINSPEC_NODES="2", TRAINSPEC_PROCS_PER_NODE="2"),
        ["8", "4", "OMPI_COMM_WORLD_SIZE=8", "resources.nodes (2)", "resources.procs_per_node (2)"],
        id="mpi-world-size",
    ),
    pytest.param(
        azureml_mpi(0, nodes=2, procs=4, TRAINSPEC_NODES="4", TRAINSPEC_PROCS_PER_NODE="2"),
        ["4", "2", "OMPI_COMM_WORLD_LOCAL_SIZE=4", "resources.procs_per_node"],
        id="mpi-procs-per-node",
    ),
    pytest.param(
        {**torchrun(0, nodes=2, procs=2), "TRAINSPEC_NODES": "4"},
        ["2", "4", "GROUP_WORLD_SIZE=2", "resources.nodes (4)"],
        id="torchrun-nodes",
    ),
    pytest.param(
        {**azureml_pytorch(0, nodes=2, procs=4), "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4",
         "TRAINSPEC_LAUNCHER": "per-node"},
        ["8", "2", "WORLD_SIZE=8", "resources.nodes (2)", "per-node"],
        id="per-node-but-platform-started-every-process",
    ),
    pytest.param(
        {"TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "1", "TRAINSPEC_SPEC": "specs/train.yaml"},
        ["1", "2", "resources.nodes (2)", "specs/train.yaml"],
        id="no-launcher-found",
    ),
]


@pytest.mark.parametrize("env, fragments", MISMATCH_CASES)
def test_mismatch_names_both_numbers_and_the_spec_field(env, fragments):
    with pytest.raises(ShimError) as caught:
        normalize(env)
    message = str(caught.value)
    assert "resources." in message
    for fragment in fragments:
        assert fragment in message, message


def test_world_size_message_reads_well():
    env = {**azureml_pytorch(0, nodes=1, procs=4), "TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": "4"}
    with pytest.raises(ShimError) as caught:
        normalize(env)
    assert str(caught.value) == (
        "the platform started 4 processes (WORLD_SIZE=4) but the spec expects 8 = resources.nodes (2) x "
        "resources.procs_per_node (4) [launcher per-process]; check the job's instance count and processes "
        "per instance"
    )


@pytest.mark.parametrize(
    "world, fragment",
    [
        pytest.param(World("env", "h", 1, 4, 4, 0, 2, 1, 2), "rank 4 (RANK=4) is outside 0..3 (WORLD_SIZE=4)",
                     id="rank"),
        pytest.param(World("env", "h", 1, 4, 3, 1, 2, 2, 2), "node_rank 2", id="node-rank"),
        pytest.param(World("env", "h", 1, 4, 3, 2, 2, 1, 2), "local_rank 2", id="local-rank"),
        pytest.param(World("env", "h", 1, 4, 1, 0, 2, 1, 2), "did not place consecutive ranks", id="placement"),
    ],
)
def test_inconsistent_world(world, fragment):
    with pytest.raises(ShimError) as caught:
        verify(world, Expectation())
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "env, name",
    [
        ({"TRAINSPEC_NODES": "two"}, "TRAINSPEC_NODES='two'"),
        ({"TRAINSPEC_PROCS_PER_NODE": "0"}, "TRAINSPEC_PROCS_PER_NODE=0"),
        ({"TRAINSPEC_LAUNCHER": "srun"}, "TRAINSPEC_LAUNCHER='srun'"),
        ({"TRAINSPEC_MASTER_PORT": "70000"}, "TRAINSPEC_MASTER_PORT=70000"),
        ({**azureml_pytorch(0), "RANK": "x"}, "RANK='x'"),
        ({**torchrun(0), "LOCAL_WORLD_SIZE": ""}, "LOCAL_WORLD_SIZE is not set"),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG="),
        ({"TF_CONFIG": '{"cluster":{"worker":["h:1"]},"task":{"type":"ps","index":0}}'}, "'ps'"),
        (azureml_mpi(0, AZ_BATCH_MASTER_NODE="10.0.0.4:port"), "AZ_BATCH_MASTER_NODE='10.0.0.4:port'"),
        (azureml_mpi(0, OMPI_COMM_WORLD_SIZE="6"), "not a multiple"),
    ],
    ids=["nodes", "procs", "launcher", "port", "rank", "torchrun-local-size", "tf-json", "tf-ps", "batch-master",
         "uneven"],
)
def test_garbled_variables_are_named(env, name):
    with pytest.raises(ShimError) as caught:
        normalize(env)
    assert name in str(caught.value)


# ---------------------------------------------------------------- the real file


def run_shim(args, env, shim_path, python=(sys.executable,)):
    full_env = {"PATH": os.environ["PATH"], **env}
    return subprocess.run([*python, str(shim_path), *args], env=full_env, capture_output=True, text=True,
                          timeout=300)


def test_print_shows_the_exports(shipped):
    env = azureml_mpi(5, TRAINSPEC_NODES="2", TRAINSPEC_PROCS_PER_NODE="4", TRAINSPEC_LAUNCHER="mpi")
    done = run_shim(["--print"], env, shipped)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "GROUP_RANK=1", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=10.0.0.4", "MASTER_PORT=6105",
        "NODE_RANK=1", "RANK=5", "WORLD_SIZE=8"]
    assert done.stderr == ""  # only rank 0 talks


def test_rank0_prints_one_line(shipped):
    env = azureml_mpi(0, TRAINSPEC_NODES="2", TRAINSPEC_PROCS_PER_NODE="4", TRAINSPEC_LAUNCHER="mpi")
    done = run_shim(["--print"], env, shipped)
    assert done.stderr == (
        "trainspec: azureml-mpi detected; world 8 = 2 node(s) x 4 process(es) [mpi]; master 10.0.0.4:6105\n")


def test_mismatch_exits_3_without_traceback(shipped):
    env = azureml_mpi(0, TRAINSPEC_NODES="3", TRAINSPEC_PROCS_PER_NODE="4")
    done = run_shim(["--", "python", "-c", "raise SystemExit('must not run')"], env, shipped)
    assert done.returncode == 3
    assert done.stderr.startswith("trainspec: error: the platform started 8 processes")
    assert "resources.nodes (3)" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_usage_errors_exit_2(shipped):
    assert run_shim([], {}, shipped).returncode == 2
    assert run_shim(["--bogus", "--", "true"], {}, shipped).returncode == 2


def test_shim_execs_the_command(shipped):
    env = {**azureml_pytorch(0, nodes=1, procs=1), "TRAINSPEC_NODES": "1", "TRAINSPEC_PROCS_PER_NODE": "1"}
    code = "import os; print(os.environ['NODE_RANK']); print(os.getppid())"
    done = run_shim(["--", sys.executable, "-c", code], env, shipped)
    assert done.returncode == 0, done.stderr
    node_rank, parent = done.stdout.split()
    assert node_rank == "0"
    assert int(parent) == os.getpid()  # the shim became the command: no process in between


def test_missing_command_exits_127(shipped):
    done = run_shim(["--", "no-such-command-trainspec"], {"MASTER_PORT": "5000"}, shipped)
    assert done.returncode == 127 and "no-such-command-trainspec" in done.stderr


def test_copied_file_is_self_contained(tmp_path, shipped):
    copy = tmp_path / "trainspec_shim.py"
    shutil.copyfile(shipped, copy)
    env = {**tf_config(1), "TRAINSPEC_NODES": "3", "TRAINSPEC_PROCS_PER_NODE": "1"}
    done = run_shim(["--print"], env, shim_path=copy, python=(sys.executable, "-I", "-S"))
    assert done.returncode == 0, done.stderr
    assert "NODE_RANK=1" in done.stdout.splitlines()


def test_import_is_cheap(tmp_path, shipped):
    """The shim runs before every training process: it must not pull in heavy modules."""
    shutil.copyfile(shipped, tmp_path / "trainspec_shim.py")
    code = ("import sys; sys.path.insert(0, %r); before = set(sys.modules); import trainspec_shim; "
            "print(' '.join(sorted(set(sys.modules) - before)))" % str(tmp_path))
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=300)
    new = set(done.stdout.split())
    assert "trainspec_shim" in new
    assert not new & {"json", "socket", "subprocess", "argparse", "typing", "trainspec", "logging"}


def test_module_has_no_trainspec_imports(shipped):
    source = shipped.read_text()
    assert "import trainspec" not in source and "from trainspec" not in source and "from ." not in source
    assert AZUREML.World is World


def test_compiled_jobs_start_the_shim_isolated_from_the_jobs_python_environment(tmp_path, shipped):
    """Every compiled job starts the shim with `python -I -S`: a sitecustomize or PYTHONPATH in the
    job's environment cannot break or slow it (and skipping site is most of its start-up). The
    command it execs still gets that environment."""
    from ruamel.yaml import YAML

    from conftest import REPO

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("raise SystemExit('the job environment ran in the shim')\n")
    job = YAML(typ="safe", pure=True).load((REPO / "tests/golden/mnist-lightning/azureml/job.yml").read_text())
    prefix = job["command"].split(" -- ")[0].replace("${{inputs.trainspec_runtime}}", str(shipped))
    assert prefix.split()[:3] == ["python", "-I", "-S"]
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
           "PYTHONPATH": str(site)}
    isolated = subprocess.run(f"{prefix} --print -- true", shell=True, env=env, capture_output=True, text=True,
                              timeout=300)
    assert isolated.returncode == 0 and "RANK=0" in isolated.stdout, isolated.stderr
    plain = subprocess.run(f"python {shipped} --print -- true", shell=True, env=env, capture_output=True,
                           text=True, timeout=300)
    assert plain.returncode != 0 and "the job environment ran in the shim" in plain.stderr


# ---------------------------------------------------------------- Kubeflow (runtime/kubernetes_detector.py, a Kubernetes job's shim)


def trainjob(node, nodes=3, procs=4, **extra):
    """What the Trainer's torch plugin puts in the trainer container of node ``node``'s pod, and nothing else."""
    return {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(procs), "PET_NODE_RANK": str(node),
            "PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500", **extra}


def pytorchjob(pod, pods=3, nproc="4", **extra):
    """What the training-operator sets in pod ``pod`` (Master 0, Worker i -> i + 1)."""
    procs = 1 if nproc == "auto" else int(nproc)
    return {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "PET_MASTER_ADDR": "job-master-0",
            "PET_MASTER_PORT": "23456", "WORLD_SIZE": str(pods * procs), "RANK": str(pod), "PET_NODE_RANK": str(pod),
            "PET_NNODES": str(pods), "PET_NPROC_PER_NODE": nproc, "PYTHONUNBUFFERED": "1", **extra}


PER_NODE = {"TRAINSPEC_LAUNCHER": "per-node", "TRAINSPEC_NODES": "3", "TRAINSPEC_PROCS_PER_NODE": "4"}
PER_PROCESS = {"TRAINSPEC_LAUNCHER": "per-process", "TRAINSPEC_NODES": "3", "TRAINSPEC_PROCS_PER_NODE": "1"}

KUBEFLOW_CASES = [  # env, the world, the exports that differ by platform
    pytest.param({**trainjob(2), **PER_NODE, "TRAINSPEC_MASTER_PORT": "29500"},
                 World("kubeflow-trainjob", "job-node-0-0.job", 29500, 3, 2, 0, 1, 2, 3),
                 {"PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "4", "NODE_RANK": "2",
                  "MASTER_ADDR": "job-node-0-0.job", "MASTER_PORT": "29500", "RANK": None, "WORLD_SIZE": None},
                 id="trainjob-per-node"),
    pytest.param({**trainjob(1, procs=1), **PER_PROCESS},
                 World("kubeflow-trainjob", "job-node-0-0.job", 29500, 3, 1, 0, 1, 1, 3),
                 {"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "job-node-0-0.job"},
                 id="trainjob-per-process"),
    pytest.param({**pytorchjob(1), **PER_NODE},
                 World("kubeflow-pytorchjob", "job-master-0", 23456, 3, 1, 0, 1, 1, 3),
                 {"PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "4", "RANK": None, "WORLD_SIZE": None},
                 id="pytorchjob-per-node-worker-0"),
    pytest.param({**pytorchjob(0, nproc="auto"), **PER_NODE},
                 World("kubeflow-pytorchjob", "job-master-0", 23456, 3, 0, 0, 1, 0, 3),
                 {"PET_NPROC_PER_NODE": "4"},  # the spec's number, not "auto"
                 id="pytorchjob-per-node-master-auto"),
    pytest.param({**pytorchjob(2, nproc="1"), **PER_PROCESS},
                 World("kubeflow-pytorchjob", "job-master-0", 23456, 3, 2, 0, 1, 2, 3),
                 {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "NODE_RANK": "2"},
                 id="pytorchjob-per-process"),
]


@pytest.mark.parametrize("env, expected, exports", KUBEFLOW_CASES)
def test_kubeflow_world_and_exports(env, expected, exports):
    env = dict(env)
    assert KUBERNETES.normalize(env) == expected
    for key, value in exports.items():
        assert env.get(key) == value, (key, env.get(key))


KUBEFLOW_MISMATCHES = [
    pytest.param({**trainjob(0, nodes=2), **PER_NODE}, ["2", "PET_NNODES=2", "resources.nodes (3)"],
                 id="trainjob-nodes"),
    pytest.param({**trainjob(0, procs=8), **PER_NODE}, ["PET_NPROC_PER_NODE=8", "resources.procs_per_node (4)"],
                 id="trainjob-procs"),
    pytest.param({**trainjob(3), **PER_NODE}, ["rank 3 (PET_NODE_RANK=3) is outside 0..2 (PET_NNODES=3)"],
                 id="trainjob-node-rank"),
    pytest.param({**pytorchjob(0, pods=4), **PER_NODE}, ["PET_NNODES=4", "resources.nodes (3)"],
                 id="pytorchjob-pods"),
    pytest.param({**pytorchjob(1, PET_NODE_RANK="2"), **PER_NODE}, ["RANK=1 but PET_NODE_RANK=2"],
                 id="pytorchjob-ranks-disagree"),
    pytest.param({**trainjob(0, PET_MASTER_ADDR=""), **PER_NODE}, ["PET_MASTER_ADDR is not set"],
                 id="trainjob-no-master"),
]


@pytest.mark.parametrize("env, fragments", KUBEFLOW_MISMATCHES)
def test_kubeflow_mismatches_name_the_variable_and_the_spec_field(env, fragments):
    with pytest.raises(KUBERNETES.ShimError) as caught:
        KUBERNETES.normalize(dict(env))
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)


def test_kubeflow_detectors_come_only_with_a_kubernetes_jobs_shim(tmp_path):
    """An Azure ML job's shim does not know Kubeflow (a pod's env looks like nothing there: one
    process); a Kubernetes job's reads the pod's world."""
    env = {**trainjob(1), **PER_NODE}
    other = shim_files.ship("azureml", tmp_path / "azureml")
    alone = run_shim(["--print"], env, shim_path=other, python=(sys.executable, "-I", "-S"))
    assert alone.returncode != 0 and "resources.nodes (3)" in alone.stderr, alone.stderr
    done = run_shim(["--print"], env, shim_path=shim_files.ship("kubernetes", tmp_path / "kubernetes"),
                    python=(sys.executable, "-I", "-S"))
    assert done.returncode == 0, done.stderr
    assert "PET_NODE_RANK=1" in done.stdout.splitlines() and "NODE_RANK=1" in done.stdout.splitlines()


def test_inside_torchrun_in_a_kubeflow_pod_the_workers_keep_torchruns_world():
    env = {**trainjob(1, nodes=2, procs=2), **torchrun(3)}
    assert KUBERNETES.detect(env)[0].name == "torchelastic"
