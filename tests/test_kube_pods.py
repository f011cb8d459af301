"""tests/kube_pods.py: the pods a Kubeflow job becomes, emulated and run on this machine.

The pod lists are checked against what the controllers' source says (kubernetes.md); then real
runs: a TrainJob of 2 nodes x 2 processes on the pinned torch-distributed runtime, whose
`torchrun /workspace/probe.py` (the probe from a ConfigMap, /dev/shm an emptyDir) finds its peers
through nothing but the PET_* variables and the pods' DNS names; a PyTorchJob whose plain
env:// script needs only the operator's MASTER_ADDR/RANK/WORLD_SIZE; a failing pod that stops
the run. Every namespace, mount, mount point and process is gone afterwards.
"""

import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest
import yaml

from conftest import processes_with
from kube_schema import REFERENCE, validate_stream

pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"the pinned Kubeflow files are not at {REFERENCE}")

import kube_pods  # noqa: E402
from kube_pods import EmulationError, job_pods, run_pods  # noqa: E402

PROBE = textwrap.dedent("""\
    import json, os, socket
    from datetime import timedelta
    import torch, torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    total = torch.ones(1)
    dist.all_reduce(total)
    shm = "/dev/shm"
    print("PROBE " + json.dumps({
        "rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": int(total.item()),
        "hostname": socket.gethostname(), "master_addr": os.environ["MASTER_ADDR"],
        "master_ip": socket.gethostbyname(os.environ["MASTER_ADDR"]),
        "node_rank": os.environ.get("GROUP_RANK", os.environ.get("RANK")),
        "probe_mode": oct(os.stat(__file__).st_mode & 0o777),
        "shm_is_tmpfs": any(line.split()[1] == shm and line.split()[2] == "tmpfs" for line in open("/proc/mounts")),
        "completion_index": os.environ.get("JOB_COMPLETION_INDEX")}), flush=True)
    dist.destroy_process_group()
""")

TRAINJOB = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: k8s-ddp-code
data:
  probe.py: {probe}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: k8s-ddp
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 2
    numProcPerNode: 2
    command: [torchrun, /workspace/probe.py]
    env:
      - name: PROBE_NOTE
        value: node $(PET_NODE_RANK) of $(PET_NNODES)
  runtimePatches:
    - manager: trainspec.dev/test
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      spec:
                        volumes:
                          - name: code
                            configMap:
                              name: k8s-ddp-code
                              defaultMode: 0555
                          - name: shm
                            emptyDir:
                              medium: Memory
                              sizeLimit: 64Mi
                        containers:
                          - name: node
                            volumeMounts:
                              - name: code
                                mountPath: /workspace
                              - name: shm
                                mountPath: /dev/shm
"""

PYTORCHJOB = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: plain-code
data:
  train.py: {probe}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: plain
spec:
  nprocPerNode: "1"
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: pytorch/pytorch
              command: [python, /code/train.py]
              volumeMounts: [{{name: code, mountPath: /code}}]
          volumes: [{{name: code, configMap: {{name: plain-code}}}}]
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: pytorch/pytorch
              command: [python, /code/train.py]
              volumeMounts: [{{name: code, mountPath: /code}}]
          volumes: [{{name: code, configMap: {{name: plain-code}}}}]
"""


def documents(template, probe=PROBE):
    text = template.format(probe=json.dumps(probe))
    assert validate_stream(text) == []  # what is run is what the API server would accept
    return [d for d in yaml.safe_load_all(text) if d]


# --- the pods, as the controllers make them -------------------------------------------------------

def test_trainjob_pods_names_and_exactly_the_torch_plugins_variables():
    pods = job_pods(documents(TRAINJOB))
    assert [p.name for p in pods] == ["k8s-ddp-node-0-0", "k8s-ddp-node-0-1"]
    assert [(p.hostname, p.subdomain) for p in pods] == [("k8s-ddp-node-0-0", "k8s-ddp"), ("k8s-ddp-node-0-1", "k8s-ddp")]
    for index, pod in enumerate(pods):
        assert pod.env == [
            ("JOB_COMPLETION_INDEX", str(index)),
            ("PROBE_NOTE", f"node $(PET_NODE_RANK) of $(PET_NNODES)"),  # defined later: not expanded (kubelet)
            ("PET_NNODES", "2"), ("PET_NPROC_PER_NODE", "2"), ("PET_NODE_RANK", str(index)),
            ("PET_MASTER_ADDR", "k8s-ddp-node-0-0.k8s-ddp"), ("PET_MASTER_PORT", "29500")]
        assert pod.annotations == {"batch.kubernetes.io/job-completion-index": str(index)}
        assert pod.command == ["torchrun", "/workspace/probe.py"]
        assert [m["mountPath"] for m in pod.volume_mounts] == ["/workspace", "/dev/shm"]
        assert "k8s-ddp-node-0-%d.k8s-ddp.default.svc.cluster.local" % index in pod.dns_names()


def test_trainjob_defaults_from_the_runtime_and_auto_procs_from_cpus():
    """numProcPerNode unset, no GPU: the CPU request rounded up (>= 1); numNodes from mlPolicy."""
    job = yaml.safe_load(TRAINJOB.split("---\n")[1])
    del job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["numProcPerNode"], job["spec"]["runtimePatches"]
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "1500m"}}
    job["spec"]["trainer"]["args"] = ["--rank", "$(PET_NODE_RANK)", "$$(literal)"]
    (pod,) = job_pods([job])
    assert pod.environ["PET_NNODES"] == "1" and pod.environ["PET_NPROC_PER_NODE"] == "2"
    assert pod.command == ["torchrun", "/workspace/probe.py", "--rank", "0", "$(literal)"]
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": 8}}
    assert job_pods([job])[0].environ["PET_NPROC_PER_NODE"] == "auto"


def test_pytorchjob_pods_and_the_operators_variables():
    docs = documents(PYTORCHJOB)
    docs[1]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    docs[1]["spec"]["nprocPerNode"] = "4"
    pods = job_pods(docs)
    assert [p.name for p in pods] == ["plain-master-0", "plain-worker-0", "plain-worker-1"]
    for rank, pod in enumerate(pods):
        assert pod.env == [
            ("PYTHONUNBUFFERED", "1"), ("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"),
            ("MASTER_ADDR", "plain-master-0"), ("PET_MASTER_ADDR", "plain-master-0"),
            ("WORLD_SIZE", "12"), ("RANK", str(rank)), ("PET_NODE_RANK", str(rank)),
            ("PET_NPROC_PER_NODE", "4"), ("PET_NNODES", "3")]
        assert pod.dns_names()[0] == pod.name
    ports = docs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    ports["ports"] = [{"name": "pytorchjob-port", "containerPort": 30000}]
    assert job_pods(docs)[2].environ["MASTER_PORT"] == "30000"


def test_what_is_not_emulated_is_said():
    docs = documents(PYTORCHJOB)
    docs[1]["spec"]["elasticPolicy"] = {"maxReplicas": 2}
    with pytest.raises(EmulationError, match="elastic"):
        job_pods(docs)
    job = yaml.safe_load(TRAINJOB.split("---\n")[1])
    job["spec"]["runtimeRef"]["name"] = "deepspeed-distributed"
    with pytest.raises(EmulationError, match="Torch"):
        job_pods([job])
    job["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    with pytest.raises(EmulationError, match="no-such-runtime"):
        job_pods([job])


# --- real runs ----------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
    reason="pods run in network, mount, UTS and pid namespaces: needs root, iproute2 and util-linux")


def leftovers(result):
    """Namespaces of this test process and processes of the run still there."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return ([line for line in netns.splitlines() if line.startswith(f"trainspec-{os.getpid()}-")]
            + processes_with(f"{kube_pods.MARKER}={result.run_id}"))


def mount_points() -> set:
    """The mounts of this process's mount namespace, as (mount point, root, source) triples: what
    the run could leave behind, without the mount ids that every new mount renumbers."""
    found = set()
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            found.add((fields[4], fields[3], fields[fields.index("-") + 2]))
    return found


def mounts_left(before: set) -> list:
    """Mounts the run added and did not remove. /run/netns itself is not the run's: the first
    `ip netns add` on a machine mounts it once and for good (iproute2 shares it so that namespaces
    outlive their creator), so it appears on a machine where it was never mounted before."""
    ours = f"/run/netns/trainspec-{os.getpid()}-"  # another process's namespaces (a Slurm cluster test
    # running beside this one, tests/conftest.py) are mounts there too, and not this run's
    return sorted(m for m in mount_points() - before
                  if m[0] != "/run/netns" and (not m[0].startswith("/run/netns/") or m[0].startswith(ours)))


def as_on_a_new_machine() -> None:
    """/run/netns unmounted when it holds no namespace, as on a machine where `ip netns add` never
    ran: the run must then leave nothing behind but that one mount (mounts_left)."""
    if os.path.ismount("/run/netns") and not os.listdir("/run/netns"):
        # refused (busy) when another test's namespace appeared since: it is then not a new machine's
        # state, and mounts_left still tells this run's mounts from the rest
        subprocess.run(["umount", "/run/netns"], capture_output=True, timeout=30)


def probes(output):
    return [json.loads(m) for m in re.findall(r"^PROBE (\{.*\})$", output, re.M)]


@pytest.mark.realproc
@needs_root
def test_trainjob_runs_on_two_pods_with_torchrun_and_the_pods_dns_names(tmp_path):
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    docs = documents(TRAINJOB)
    as_on_a_new_machine()
    mounts_before = mount_points()
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", timeout=120)
    assert result.ok, result.output
    ranks = sorted((r for out in result.output.values() for r in probes(out)), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["world_size"] for r in ranks} == {4} and {r["sum"] for r in ranks} == {4}
    by_pod = {name: probes(out) for name, out in result.output.items()}
    for index, name in enumerate(["k8s-ddp-node-0-0", "k8s-ddp-node-0-1"]):
        assert {r["hostname"] for r in by_pod[name]} == {name}
        assert {r["node_rank"] for r in by_pod[name]} == {str(index)}
        assert {r["completion_index"] for r in by_pod[name]} == {str(index)}
    # torchrun's MASTER_ADDR is PET_MASTER_ADDR, the JobSet DNS name; it resolves to node 0's address
    assert {r["master_addr"] for r in ranks} == {"k8s-ddp-node-0-0.k8s-ddp"}
    assert {r["master_ip"] for r in ranks} == {result.addresses["k8s-ddp-node-0-0"]}
    assert result.addresses["k8s-ddp-node-0-0"] != result.addresses["k8s-ddp-node-0-1"]
    assert {r["probe_mode"] for r in ranks} == {"0o555"}  # the ConfigMap's defaultMode
    assert {r["shm_is_tmpfs"] for r in ranks} == {True}   # emptyDir medium Memory
    # nothing left: namespaces, mounts, the /workspace mount point, processes
    assert leftovers(result) == []
    assert mounts_left(mounts_before) == []
    assert not os.path.exists("/workspace")


@pytest.mark.realproc
@needs_root
def test_pytorchjob_runs_a_plain_env_script_with_the_operators_variables(tmp_path):
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    docs = documents(PYTORCHJOB)
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", timeout=120)
    assert result.ok, result.output
    master, worker = probes(result.output["plain-master-0"]), probes(result.output["plain-worker-0"])
    assert [(r["rank"], r["world_size"], r["hostname"]) for r in master + worker] == [
        (0, 2, "plain-master-0"), (1, 2, "plain-worker-0")]
    assert {r["master_ip"] for r in master + worker} == {result.addresses["plain-master-0"]}
    assert leftovers(result) == [] and not os.path.exists("/code")


FAILING = textwrap.dedent("""\
    import os, sys, time
    if os.environ["RANK"] == "1":
        print("worker gives up", flush=True)
        sys.exit(1)
    print("master waits", flush=True)
    time.sleep(600)  # the master would wait for its peer: the run must stop it
""")


@pytest.mark.realproc
@needs_root
def test_a_failing_pod_fails_the_run_and_every_other_pod_is_stopped(tmp_path):
    docs = documents(PYTORCHJOB, FAILING)
    as_on_a_new_machine()
    mounts_before = mount_points()
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", timeout=120,
                      extra_env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert not result.ok and not result.timed_out
    assert result.first_failure == "plain-worker-0" and result.exit_codes["plain-worker-0"] == 1
    assert "worker gives up" in result.output["plain-worker-0"]
    assert result.stopped == ["plain-master-0"]
    # python as a pod's pid 1 has no SIGTERM handler, so it ignores SIGTERM (as in a container): SIGKILL
    assert result.exit_codes["plain-master-0"] == 128 + 9
    assert leftovers(result) == [] and not os.path.exists("/code")
    assert mounts_left(mounts_before) == []


@pytest.mark.realproc
@needs_root
def test_the_timeout_stops_every_pod(tmp_path):
    docs = documents(PYTORCHJOB, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", timeout=3)
    assert result.timed_out and not result.ok
    assert result.stopped == ["plain-master-0", "plain-worker-0"]
    assert leftovers(result) == []
