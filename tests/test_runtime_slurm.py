"""The shim's Slurm detector, table-driven: what srun sets in, World and exports out (slurm.md:
the variables a task sees, verified on a real cluster), and Slurm's compressed host lists. On the
shim a Slurm job ships: Slurm's detector alone, with torch's own (shim_files.load)."""

import pytest

import shim_files

SLURM = shim_files.load("slurm")
Expectation, ShimError, World, detect, normalize = (SLURM.Expectation, SLURM.ShimError, SLURM.World, SLURM.detect,
                                                    SLURM.normalize)
Slurm, TorchElastic, expand_hostlist = SLURM.Slurm, SLURM.TorchElastic, SLURM.expand_hostlist


def srun_env(rank, nodes=2, per_node=2, nodelist="n[1-2]", **extra):
    """One task of `srun --nodes=N --ntasks-per-node=P` (block distribution), as slurm.md shows it."""
    env = {
        "SLURM_JOB_ID": "1234", "SLURM_JOB_NAME": "job", "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID": str(rank // per_node),
        "SLURM_NTASKS": str(nodes * per_node), "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(per_node), "SLURMD_NODENAME": expand_hostlist(nodelist)[rank // per_node],
    }
    return {**env, **extra}


def expected(nodes, per_node, launcher="per-process", port=6105):
    return {"TRAINSPEC_NODES": str(nodes), "TRAINSPEC_PROCS_PER_NODE": str(per_node),
            "TRAINSPEC_LAUNCHER": launcher, "TRAINSPEC_MASTER_PORT": str(port)}


#                platform, master_addr, master_port, world_size, rank, local_rank, local_world_size, node_rank, nodes
WORLDS = [
    pytest.param(srun_env(0), World("slurm", "n1", 16234, 4, 0, 0, 2, 0, 2), id="rank0-port-from-job-id"),
    pytest.param(srun_env(3), World("slurm", "n1", 16234, 4, 3, 1, 2, 1, 2), id="rank3"),
    pytest.param(srun_env(2, **expected(2, 2)), World("slurm", "n1", 16234, 4, 2, 0, 2, 1, 2), id="spec-port"),
    pytest.param(srun_env(1, MASTER_PORT="29500"), World("slurm", "n1", 29500, 4, 1, 1, 2, 0, 2),
                 id="master-port-set"),
    pytest.param(srun_env(5, nodes=3, per_node=2, nodelist="gpu-[07-09]"),
                 World("slurm", "gpu-07", 16234, 6, 5, 1, 2, 2, 3), id="zero-padded-list"),
    pytest.param(srun_env(1, nodes=2, per_node=1, nodelist="login1,gpu-[01-04]", SLURM_STEP_NODELIST="gpu-[01-02]",
                          SLURM_JOB_NUM_NODES="5"),
                 World("slurm", "gpu-01", 16234, 2, 1, 0, 1, 1, 2), id="step-of-a-larger-job"),
    pytest.param(srun_env(0, nodes=1, per_node=4, nodelist="node001"), World("slurm", "node001", 16234, 4, 0, 0, 4, 0, 1),
                 id="one-node"),
]


@pytest.mark.parametrize("env, world", WORLDS)
def test_world_from_what_srun_sets(env, world):
    detector, found = detect(env, Expectation.from_env(env))
    assert detector is Slurm and found == world
    normalized = normalize(dict(env), apply=False)
    port = int(env.get("TRAINSPEC_MASTER_PORT", found.master_port))
    assert normalized == found._replace(master_port=port)


HOSTLISTS = [
    ("n[1-2]", ["n1", "n2"]),
    ("gpu-[01-04,07],login1", ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "login1"]),
    ("node001", ["node001"]),
    ("a,b,c", ["a", "b", "c"]),
    ("x[8-11]", ["x8", "x9", "x10", "x11"]),  # no padding: widths grow
    ("x[098-101]", ["x098", "x099", "x100", "x101"]),  # padding to the width written
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),  # several groups multiply
    ("c[1,3-4]", ["c1", "c3", "c4"]),
    ("ndv5-[0-1],ndv5-hpc-[10-11]", ["ndv5-0", "ndv5-1", "ndv5-hpc-10", "ndv5-hpc-11"]),
    ("10.213.0.2,10.213.0.3", ["10.213.0.2", "10.213.0.3"]),
]


@pytest.mark.parametrize("text, hosts", HOSTLISTS)
def test_compressed_host_lists_expand_as_scontrol_show_hostnames_does(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, fragment", [
    ("n[1-2", "'[' without its ']'"), ("n1-2]", "']' without its '['"), ("n[a-b]", "'a-b' is not a number"),
    ("n[3-1]", "'3-1' is not a number or a range"),
])
def test_a_garbled_host_list_is_named(text, fragment):
    with pytest.raises(ShimError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        expand_hostlist(text)


@pytest.mark.parametrize("env, fragments", [
    (srun_env(0, SLURM_JOB_NODELIST="", SLURM_STEP_NODELIST=""), ["SLURM_JOB_NODELIST is not set", "srun"]),
    (srun_env(0, SLURM_NTASKS="3"), ["SLURM_NTASKS=3 is not a multiple of SLURM_JOB_NUM_NODES=2"]),
    (srun_env(0, SLURM_LOCALID="x"), ["SLURM_LOCALID='x' is not an integer"]),
    (srun_env(3, **expected(3, 2)), ["4 processes (SLURM_NTASKS=4)", "6 = resources.nodes (3)"]),
    (srun_env(1, **expected(2, 4)), ["4 processes (SLURM_NTASKS=4)", "8 = resources.nodes (2) x "
                                     "resources.procs_per_node (4)"]),
    (srun_env(1, nodes=2, per_node=4, SLURM_NTASKS="8", **expected(4, 2)),
     ["4 processes on this node (SLURM_NTASKS/SLURM_JOB_NUM_NODES=4)", "resources.procs_per_node (2)"]),
])
def test_a_world_that_disagrees_names_the_slurm_variable_and_the_spec_field(env, fragments):
    with pytest.raises(ShimError) as caught:
        normalize(dict(env), apply=False)
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)


def test_per_node_hides_slurm_from_lightning_and_hands_torchrun_the_world():
    """Per node: one task per node, which runs torchrun or Lightning's spawn. Lightning picks its
    SLURMEnvironment whenever SLURM_NTASKS is set (and would then never spawn): the shim unsets it."""
    env = srun_env(1, nodes=2, per_node=1, **expected(2, 4, "per-node"))
    normalize(env)
    assert "SLURM_NTASKS" not in env and "LOCAL_RANK" not in env and "RANK" not in env
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"], env["PET_MASTER_ADDR"],
            env["PET_MASTER_PORT"]) == ("2", "1", "4", "n1", "6105")
    per_process = srun_env(1, **expected(2, 2))
    normalize(per_process)
    assert per_process["SLURM_NTASKS"] == "4"  # per process, Lightning's SLURMEnvironment agrees with the shim


def test_torchrun_workers_inside_a_slurm_task_stay_torchruns():
    env = {**srun_env(0, nodes=2, per_node=1), "TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "n1",
           "MASTER_PORT": "6105", "WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
    detector, world = detect(env)
    assert detector is TorchElastic and (world.rank, world.world_size, world.node_rank) == (5, 8, 1)
