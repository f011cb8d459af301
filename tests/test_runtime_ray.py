"""The Ray side of the runtime, without a Ray cluster: the shim's Ray detector (driver
variables in, World and exports out), its idempotency (shim inside shim; Ray Train's already
initialized process group), and the driver's pure parts (the job request, ranks, environment) --
including that what the driver exports is exactly what the detector reads.

The driver against a real local Ray cluster: tests/test_ray_driver.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shim_files
from trainspec.runtime import DETECTORS
from trainspec.runtime import procs as procs_module
from trainspec.runtime import ray_driver, ray_request
from trainspec.runtime.ray_driver import DriverError, Slot, assign, parse_args, process_env, read_request, share
from trainspec.runtime.ray_request import Request, RequestError

DRIVER_PATH = Path(ray_driver.__file__)
REQUEST_TYPE_PATH = Path(ray_request.__file__)

RAY = shim_files.load("ray")  # the shim a Ray job ships: Ray's detector alone, with torch's own
ShimError, World, detect, normalize = RAY.ShimError, RAY.World, RAY.detect, RAY.normalize



def ray_env(rank, nodes=2, procs=4, launcher="per-process", expect=True, **extra):
    """What trainspec_ray_driver.py gives process `rank` (per-node: node `rank`'s launcher process)."""
    per_node = launcher == "per-node"
    env = {
        "TRAINSPEC_RAY": "1",
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": "41234",
        "WORLD_SIZE": str(nodes if per_node else nodes * procs),
        "RANK": str(rank),
        "LOCAL_RANK": "0" if per_node else str(rank % procs),
        "LOCAL_WORLD_SIZE": "1" if per_node else str(procs),
        "NODE_RANK": str(rank if per_node else rank // procs),
    }
    if expect:  # what the compiler writes into the request's env
        env.update({"TRAINSPEC_NODES": str(nodes), "TRAINSPEC_PROCS_PER_NODE": str(procs),
                    "TRAINSPEC_LAUNCHER": launcher, "TRAINSPEC_SPEC": "specs/ray.yaml"})
    return {**env, **extra}


# ---------------------------------------------------------------- the detector

#                 platform, master_addr, master_port, world_size, rank, local_rank, local_world_size, node_rank, nodes
WORLD_CASES = [
    pytest.param(ray_env(0), World("ray", "10.0.0.7", 41234, 8, 0, 0, 4, 0, 2), id="per-process-rank0"),
    pytest.param(ray_env(5), World("ray", "10.0.0.7", 41234, 8, 5, 1, 4, 1, 2), id="per-process-rank5"),
    pytest.param(ray_env(7, expect=False), World("ray", "10.0.0.7", 41234, 8, 7, 3, 4, 1, 2),
                 id="per-process-no-expectations"),
    pytest.param(ray_env(1, launcher="per-node"), World("ray", "10.0.0.7", 41234, 2, 1, 0, 1, 1, 2),
                 id="per-node-node1"),
    pytest.param(ray_env(3, TRAINSPEC_MASTER_PORT="29400"), World("ray", "10.0.0.7", 29400, 8, 3, 3, 4, 0, 2),
                 id="spec-pins-the-port"),
    pytest.param(ray_env(2, nodes=1, procs=4), World("ray", "10.0.0.7", 41234, 4, 2, 2, 4, 0, 1), id="one-node"),
    pytest.param(
        # a Ray cluster on Azure ML compute or an MPI host: stale platform variables must not win
        ray_env(6, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="1", OMPI_COMM_WORLD_LOCAL_RANK="0",
                OMPI_COMM_WORLD_LOCAL_SIZE="1", AZUREML_RUN_ID="run-1", TF_CONFIG="{}"),
        World("ray", "10.0.0.7", 41234, 8, 6, 2, 4, 1, 2), id="marker-beats-stale-platform-variables"),
]


@pytest.mark.parametrize("env, expected", WORLD_CASES)
def test_world_from_launcher_env(env, expected):
    assert normalize(dict(env), apply=False) == expected


def test_ray_sits_after_torchrun_and_hpcpack_before_azure_ml():
    assert [d.name for d in RAY.DETECTORS] == ["torchelastic", "ray", "env", "single-process"]
    names = [d.name for d in DETECTORS]  # the package's, every platform's
    assert names.index("torchelastic") < names.index("hpcpack") < names.index("ray") < names.index("azureml-mpi")
    # torchrun started by the shim of a per-node Ray launch: torchrun's workers are torchrun's
    torchrun_worker = {**ray_env(1, launcher="per-node"), "TORCHELASTIC_RUN_ID": "none", "LOCAL_WORLD_SIZE": "4",
                       "WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
    assert detect(torchrun_worker)[0].name == "torchelastic"
    assert detect({"TRAINSPEC_RAY": ""})[0].name == "single-process"  # an empty marker is no marker


def test_per_process_exports():
    env = ray_env(5)
    normalize(env)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "NODE_RANK", "GROUP_RANK")} == {
        "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "41234", "WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "1", "GROUP_RANK": "1"}
    assert not any(key.startswith("PET_") for key in env)


def test_per_node_exports_unset_worker_variables_and_set_torchrun_flags():
    env = ray_env(1, launcher="per-node", procs=4)
    world = normalize(env)
    assert (world.platform, world.node_rank, world.nodes) == ("ray", 1, 2)
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        assert name not in env, name  # or Lightning would not spawn its workers
    assert {k: v for k, v in env.items() if k.startswith("PET_") or k in ("NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
                                                                          "MASTER_PORT")} == {
        "NODE_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "41234",
        "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.7", "PET_MASTER_PORT": "41234",
        "PET_NPROC_PER_NODE": "4"}


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                                  "LOCAL_WORLD_SIZE", "NODE_RANK"])
@pytest.mark.parametrize("how", ["missing", "empty"])
def test_a_missing_variable_is_named(name, how):
    env = ray_env(1)
    if how == "missing":
        del env[name]
    else:
        env[name] = " "
    with pytest.raises(ShimError) as caught:
        normalize(env)
    assert str(caught.value).startswith(name + " is not set")
    assert "TRAINSPEC_RAY=1" in str(caught.value)


@pytest.mark.parametrize("extra, fragment", [
    ({"RANK": "x"}, "RANK='x' is not an integer"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT=0 must be at least 1"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ({"NODE_RANK": "-1"}, "NODE_RANK=-1 must be at least 0"),
    ({"WORLD_SIZE": "6"}, "WORLD_SIZE=6: world size 6 is not a multiple of the processes per node 4"),
], ids=["rank", "port", "world", "node-rank", "uneven"])
def test_garbled_variables_are_named(extra, fragment):
    with pytest.raises(ShimError) as caught:
        normalize(ray_env(1, **extra))
    assert fragment in str(caught.value)


MISMATCH_CASES = [
    pytest.param(  # the launcher ran 2 x 2 for a spec of 2 x 4
        ray_env(0, nodes=2, procs=2, TRAINSPEC_PROCS_PER_NODE="4"),
        ["started 4 processes (WORLD_SIZE=4)", "expects 8 = resources.nodes (2) x resources.procs_per_node (4)",
         "specs/ray.yaml"],
        id="world-size"),
    pytest.param(  # per-node: 2 node launchers for a spec of 3 nodes
        ray_env(1, nodes=2, launcher="per-node", TRAINSPEC_NODES="3"),
        ["started 2 processes (WORLD_SIZE=2)", "expects 3 = resources.nodes (3) x 1 launcher process per node",
         "[launcher per-node]"],
        id="per-node-nodes"),
    pytest.param(  # per-node spec, but the launcher was run per-process
        ray_env(0, nodes=2, procs=4, TRAINSPEC_LAUNCHER="per-node"),
        ["started 8 processes (WORLD_SIZE=8)", "expects 2 = resources.nodes (2) x 1 launcher process per node"],
        id="launcher-mode"),
    pytest.param(
        ray_env(9),
        ["rank 9 (RANK=9) is outside 0..7 (WORLD_SIZE=8)"],
        id="rank-outside"),
    pytest.param(
        ray_env(5, NODE_RANK="0"),
        ["rank 5 (RANK=5) is not node_rank 0 (NODE_RANK=0) x local_world_size 4 + local_rank 1 (LOCAL_RANK=1)"],
        id="placement"),
]


@pytest.mark.parametrize("env, fragments", MISMATCH_CASES)
def test_a_world_that_disagrees_names_both_numbers(env, fragments):
    with pytest.raises(ShimError) as caught:
        normalize(env)
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)


# ---------------------------------------------------------------- idempotency


@pytest.mark.parametrize("env", [
    ray_env(5),
    ray_env(1, launcher="per-node"),
    ray_env(0, launcher="per-node", TRAINSPEC_MASTER_PORT="29400"),
    ray_env(3, TRAINSPEC_MASTER_PORT="29400"),
], ids=["per-process", "per-node", "per-node-pinned-port", "per-process-pinned-port"])
def test_shim_inside_shim_changes_nothing(env):
    first_world = normalize(env)
    once = dict(env)
    assert normalize(env) == first_world
    assert env == once


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shim file a Ray job ships."""
    return shim_files.ship("ray", tmp_path_factory.mktemp("ray"))


def run_shim(args, env, shim):
    return subprocess.run([sys.executable, str(shim), *args], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=300)


def test_the_real_file_twice_prints_what_it_prints_once(shipped):
    env = ray_env(1, launcher="per-node")
    once = run_shim(["--print"], env, shipped)
    twice = run_shim(["--", sys.executable, str(shipped), "--print"], env, shipped)
    assert once.returncode == twice.returncode == 0, once.stderr + twice.stderr
    assert once.stdout == twice.stdout
    assert "PET_NNODES=2" in once.stdout.splitlines() and "RANK=1" not in once.stdout.splitlines()


def test_rank0_line_says_ray(shipped):
    done = run_shim(["--print"], ray_env(0, nodes=2, procs=2), shipped)
    assert done.stderr == ("trainspec: ray detected; world 4 = 2 node(s) x 2 process(es) [per-process]; "
                           "master 10.0.0.7:41234\n")


def test_a_mismatch_exits_3(shipped):
    done = run_shim(["--", "false"], ray_env(0, nodes=2, procs=2, TRAINSPEC_NODES="3"), shipped)
    assert done.returncode == 3
    assert "started 4 processes (WORLD_SIZE=4)" in done.stderr and "resources.nodes (3)" in done.stderr


RAY_TRAIN_SCRIPT = r"""
import json, os, sys
from trainspec.runtime import ShimError, normalize

# Ray Train's worker environment (train/torch/config.py), and a per-node spec, whose exports
# (unset RANK, LOCAL_RANK, ...) would be wrong here if the shim applied them.
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", NODE_RANK="0",
                  MASTER_ADDR="127.0.0.1", MASTER_PORT="29555", TRAINSPEC_NODES="1", TRAINSPEC_PROCS_PER_NODE="1",
                  TRAINSPEC_LAUNCHER="per-node")
os.environ.pop("TRAINSPEC_RAY", None)
before_init = dict(os.environ)
normalize(before_init)  # not initialized yet: the shim would change things
changed_before_init = sorted(k for k in set(before_init) | set(os.environ) if before_init.get(k) != os.environ.get(k))

import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
before = dict(os.environ)
world = normalize()  # as Ray Train's train function would call it
unchanged = dict(os.environ) == before
try:
    normalize({**os.environ, "TRAINSPEC_NODES": "2"}, apply=False)
    mismatch = None
except ShimError as error:
    mismatch = str(error)
dist.destroy_process_group()
print(json.dumps({"changed_before_init": changed_before_init, "unchanged": unchanged, "world": world._asdict(),
                  "mismatch": mismatch}))
"""


def test_ray_train_initialized_process_group_is_left_alone(tmp_path):
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    done = subprocess.run([sys.executable, "-c", RAY_TRAIN_SCRIPT, str(tmp_path / "pg")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["changed_before_init"]) >= {"RANK", "LOCAL_RANK", "WORLD_SIZE", "PET_NNODES"}
    assert result["unchanged"] is True
    assert result["world"] == {"platform": "torch.distributed", "master_addr": "127.0.0.1", "master_port": 29555,
                               "world_size": 1, "rank": 0, "local_rank": 0, "local_world_size": 1, "node_rank": 0,
                               "nodes": 1}
    assert "1 processes (torch.distributed.get_world_size()=1)" in result["mismatch"]
    assert "resources.nodes (2)" in result["mismatch"]


def test_the_shim_never_imports_torch(tmp_path, shipped):
    shutil.copyfile(shipped, tmp_path / "trainspec_shim.py")
    code = ("import sys; sys.path.insert(0, %r); import trainspec_shim, os; os.environ.update(%r); "
            "trainspec_shim.normalize(); print('torch' in sys.modules)" % (str(tmp_path), ray_env(1)))
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "False", done.stderr


# ---------------------------------------------------------------- the driver's pure parts

REQUEST = {"nodes": 2, "procs_per_node": 2, "launcher": "per-process", "gpus_per_node": 0, "cpus_per_node": 1,
           "placement": "STRICT_SPREAD", "workdir": "code", "env": {}, "command": "python shim.py -- python train.py",
           "master_port": None, "timeout": None}


def request_file(folder, **fields):
    path = Path(folder) / "trainspec_ray_job.json"
    path.write_text(json.dumps({**REQUEST, **fields}))
    return str(path)


def options(tmp_path, *flags, **fields):
    return parse_args([request_file(tmp_path, **fields), *flags])


def test_the_request_and_the_run_flags(tmp_path):
    opts = options(tmp_path)
    assert (opts.gpus_per_node, opts.cpus_per_node, opts.placement, opts.address, opts.timeout, opts.grace) == (
        0, 1.0, "STRICT_SPREAD", "auto", 0.0, 10.0)
    assert opts.workdir == str(tmp_path / "code")  # relative to the request, wherever the driver runs
    assert opts.env == {} and opts.command == "python shim.py -- python train.py" and opts.master_port is None
    opts = options(tmp_path, "--address", "10.0.0.4:6379", "--timeout", "60", "--grace", "3",
                   nodes=3, procs_per_node=4, launcher="per-node", gpus_per_node=4, cpus_per_node=24,
                   placement="PACK", env={"A": "1", "B": "x=y", "C": ""}, master_port=29400)
    assert (opts.nodes, opts.procs_per_node, opts.launcher, opts.gpus_per_node, opts.cpus_per_node) == (
        3, 4, "per-node", 4, 24.0)
    assert opts.env == {"A": "1", "B": "x=y", "C": ""} and opts.master_port == 29400
    assert (opts.address, opts.timeout, opts.grace, opts.actors) == ("10.0.0.4:6379", 60.0, 3.0, 3)
    assert opts.bundle() == {"CPU": 24.0, "GPU": 4.0} and opts.actor_resources() == (24.0, 4.0)


def test_the_specs_timeout_reaches_the_driver_from_the_request(tmp_path):
    """The compiler writes the spec's timeout into the request; the driver enforces it without a
    flag (nobody edits launch.sh), names it when it fires, and --timeout still overrides it."""
    from conftest import REPO
    from trainspec.registry.build import build
    from trainspec.targets.ray import lower as ray_target

    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "specs" / "ray-lightning.yaml").read_text()
                    .replace("code: ../examples/", f"code: {REPO}/examples/")
                    .replace("framework: lightning\n", "framework: lightning\ntimeout: 1h30m\n"))
    outcome = build(str(spec), tmp_path / "out")
    assert not [d for d in outcome.diagnostics if d.is_error], outcome.diagnostics
    path = tmp_path / ray_target.REQUEST_FILE
    path.write_bytes(outcome.artifacts[0].file(ray_target.REQUEST_FILE).data)
    opts = parse_args([str(path)])
    assert (opts.timeout, opts.timeout_said) == (5400.0, "the spec's timeout: 1h30m")
    opts = parse_args([str(path), "--timeout", "60"])
    assert (opts.timeout, opts.timeout_said) == (60.0, "--timeout 60 s")
    opts = parse_args([str(path), "--timeout", "0"])  # the operator lifts it for this run
    assert opts.timeout == 0.0
    assert options(tmp_path).timeout == 0.0  # a request without one: no limit


@pytest.mark.parametrize("fields, message", [
    ({"timeout": 0}, "timeout: expected null or a number of seconds (1-1000000000000), got 0"),
    ({"timeout": "24h"}, 'timeout: expected null or a number of seconds (1-1000000000000), got "24h"'),
    ({"command": "  "}, "command: expected a non-empty shell command"),
    ({"nodes": 0}, "nodes: expected an integer >= 1, got 0"),
    ({"nodes": True}, "nodes: expected an integer >= 1, got true"),
    ({"launcher": "mpi"}, 'launcher: expected per-process or per-node, got "mpi"'),
    ({"env": {"NO VALUE": "1"}}, "env: expected a mapping of variable names to strings"),
    ({"env": {"A": 1}}, "env: expected a mapping of variable names to strings"),
    ({"cpus_per_node": 0}, "cpus_per_node: expected a number > 0, got 0"),
    ({"placement": "STRICT_PACK"}, "placement: expected STRICT_SPREAD or SPREAD or PACK"),
    ({"master_port": 70000}, "master_port: expected null or a TCP port (1-65535), got 70000"),
    ({"extra": 1}, "unknown field(s) extra"),
], ids=["zero-timeout", "text-timeout", "empty-command", "zero-nodes", "bool-nodes", "mpi", "env-name", "env-value", "zero-cpus", "placement",
        "port", "unknown"])
def test_a_bad_request_names_the_file_and_the_field(tmp_path, fields, message):
    with pytest.raises(DriverError) as caught:
        options(tmp_path, **fields)
    assert str(caught.value).startswith(str(tmp_path / "trainspec_ray_job.json") + ": ")
    assert message in str(caught.value)


def test_one_definition_writes_and_reads_the_request(tmp_path):
    """The compiler builds the driver's own Request and writes its to_json(); the driver reads the
    same type back, every field kept (the workdir made absolute, the CPUs a float)."""
    from conftest import REPO
    from trainspec.registry.build import build
    from trainspec.targets.ray import lower as ray_target

    outcome = build(str(REPO / "specs" / "ray-lightning.yaml"), tmp_path)
    written = ray_target.job_request(outcome.valid)
    assert isinstance(written, Request)
    data = outcome.artifacts[0].file(ray_target.REQUEST_FILE).data
    assert data == written.to_json()
    path = tmp_path / ray_target.REQUEST_FILE
    path.write_bytes(data)
    read = read_request(str(path))
    assert read == written.replace(workdir=str(tmp_path / "code"), cpus_per_node=8.0)


@pytest.mark.parametrize("field, value, message", [
    ("nodes", 0, "nodes: expected an integer >= 1, got 0"),
    ("launcher", "mpi", 'launcher: expected per-process or per-node, got "mpi"'),
    ("env", {"A": 1}, "env: expected a mapping of variable names to strings"),
], ids=["nodes", "launcher", "env"])
def test_the_compiler_cannot_build_a_request_the_driver_would_refuse(field, value, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        Request(**{**REQUEST, field: value})


def test_a_missing_field_or_file_is_named(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({k: v for k, v in REQUEST.items() if k != "command"}))
    with pytest.raises(DriverError, match="missing field\\(s\\) command"):
        read_request(str(path))
    with pytest.raises(DriverError, match="cannot read the job request"):
        read_request(str(tmp_path / "absent.json"))


def test_usage_errors_exit_2(tmp_path):
    for argv in ([], [request_file(tmp_path), "--timeout", "-1"], [request_file(tmp_path), "--nodes", "2"]):
        with pytest.raises(SystemExit) as caught:
            parse_args(argv)
        assert caught.value.code == 2


def test_resource_shares_fit_in_the_bundle(tmp_path):
    assert share(1, 2) == 0.5 and share(1, 3) == 0.3333 and share(24, 5) == 4.0 and share(0, 4) == 0
    assert options(tmp_path, cpus_per_node=1).actor_resources() == (0.5, 0.0)
    assert options(tmp_path, cpus_per_node=8, gpus_per_node=2).actor_resources() == (4.0, 1.0)
    assert options(tmp_path).bundle() == {"CPU": 1.0}  # no GPU key when there are none


def test_ranks_without_gpus(tmp_path):
    slots = assign(options(tmp_path), [[], [], [], []])
    assert [(s.actor, s.rank, s.node_rank, s.local_rank, s.cuda_visible_devices) for s in slots] == [
        (0, 0, 0, 0, None), (1, 1, 0, 1, None), (2, 2, 1, 0, None), (3, 3, 1, 1, None)]


def test_local_ranks_follow_the_gpu_ids_and_share_the_node_gpus(tmp_path):
    # Ray gave actor 0 GPU 3 and actor 1 GPU 1 on node 0; GPUs 0 and 2 to node 1's actors
    slots = assign(options(tmp_path, gpus_per_node=2), [["3"], ["1"], ["0"], ["2"]])
    assert [(s.actor, s.rank, s.local_rank, s.cuda_visible_devices) for s in slots] == [
        (1, 0, 0, "1,3"), (0, 1, 1, "1,3"), (2, 2, 0, "0,2"), (3, 3, 1, "0,2")]


def test_per_node_slots(tmp_path):
    slots = assign(options(tmp_path, launcher="per-node", nodes=3), [["0", "1"]] * 3)
    assert [(s.actor, s.rank, s.node_rank, s.local_rank, s.cuda_visible_devices) for s in slots] == [
        (0, 0, 0, 0, None), (1, 1, 1, 0, None), (2, 2, 2, 0, None)]


def test_the_requests_env_applies_but_the_world_wins(tmp_path):
    opts = options(tmp_path, env={"RANK": "99", "NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "0"})
    env = process_env(opts, Slot(actor=3, rank=3, node_rank=1, local_rank=1, cuda_visible_devices="0,1"),
                      "10.0.0.7", 41234)
    assert env == {"PYTHONUNBUFFERED": "0", "NCCL_DEBUG": "INFO", "TRAINSPEC_RAY": "1", "MASTER_ADDR": "10.0.0.7",
                   "MASTER_PORT": "41234", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "NODE_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}


@pytest.mark.parametrize("launcher, procs", [("per-process", 2), ("per-process", 3), ("per-node", 4)])
def test_what_the_driver_exports_is_what_the_shim_reads(tmp_path, launcher, procs):
    """The two halves of the contract: every slot's environment is a valid world of the right shape."""
    expectations = {"TRAINSPEC_NODES": "2", "TRAINSPEC_PROCS_PER_NODE": str(procs), "TRAINSPEC_LAUNCHER": launcher}
    opts = options(tmp_path, env=expectations, launcher=launcher, procs_per_node=procs)
    slots = assign(opts, [[] for _ in range(opts.actors)])
    worlds = [normalize(process_env(opts, slot, "10.0.0.7", 41234)) for slot in slots]
    assert {w.platform for w in worlds} == {"ray"}
    assert [w.rank for w in worlds] == list(range(len(slots)))
    assert {(w.world_size, w.nodes, w.master_addr, w.master_port) for w in worlds} == {
        (2 if launcher == "per-node" else 2 * procs, 2, "10.0.0.7", 41234)}


def test_exit_codes_of_signals():
    exit_code = procs_module.exit_code  # the one conversion both runners use
    assert exit_code(7) == 7 and exit_code(-15) == 143 and exit_code(0) == 0


def test_the_shipped_driver_runs_from_its_folder_and_imports_ray_late(tmp_path):
    """As the Ray target ships it: trainspec_ray_driver.py, trainspec_procs.py and
    trainspec_ray_request.py in one folder, nothing of trainspec installed; ray only imported when
    a run starts."""
    source = DRIVER_PATH.read_text()
    imports = re.findall(r"^\s*(?:from|import)\s+(trainspec\w*|\.)", source, re.M)
    # the package's procs and request, or the shipped copies
    assert sorted(set(imports)) == [".", "trainspec_procs", "trainspec_ray_request"], imports
    assert not re.findall(r"^\s*(?:from|import)\s+(trainspec|\.)", REQUEST_TYPE_PATH.read_text(), re.M)
    shutil.copyfile(DRIVER_PATH, tmp_path / "trainspec_ray_driver.py")
    shutil.copyfile(Path(procs_module.__file__), tmp_path / "trainspec_procs.py")
    shutil.copyfile(REQUEST_TYPE_PATH, tmp_path / "trainspec_ray_request.py")
    code = ("import sys; sys.path.insert(0, %r); import trainspec_ray_driver; "
            "print(trainspec_ray_driver.procs.__name__, trainspec_ray_driver.Request.__module__, "
            "sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'trainspec.'))))"
            % str(tmp_path))
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "trainspec_procs trainspec_ray_request []", \
        done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "trainspec_ray_driver.py"), "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "JOB.json" in done.stdout
    bad = request_file(tmp_path, nodes=0)
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "trainspec_ray_driver.py"), bad],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "nodes: expected an integer >= 1, got 0" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_each_rank_gets_the_interface_that_holds_its_nodes_ip(monkeypatch):
    """gloo picks its interface from the host name, which Debian images map to 127.0.1.1; the launcher
    knows the node's IP and names the interface holding it (issue 12), unless the user set one."""
    from trainspec.runtime.ray_driver import interface_of, with_interface

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("192.0.2.77") is None  # TEST-NET-1: on no interface here
    assert with_interface({"RANK": "1"}, "127.0.0.1") == {"RANK": "1", "GLOO_SOCKET_IFNAME": "lo"}
    assert with_interface({"GLOO_SOCKET_IFNAME": "ib0"}, "127.0.0.1") == {"GLOO_SOCKET_IFNAME": "ib0"}
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth1")
    assert with_interface({"RANK": "1"}, "127.0.0.1") == {"RANK": "1"}
