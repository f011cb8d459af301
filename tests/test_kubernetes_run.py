"""Kubernetes jobs as compiled, run on emulated pods (tests/kube_pods.py: one network, mount, UTS
and pid namespace per pod, the JobSet / operator host and DNS names, exactly the variables the
controllers inject, the ConfigMaps and emptyDirs mounted where job.yaml says): every rank of a
real torch DDP fit (gloo) finds its peers through the shim's Kubeflow detectors and agrees."""

import json
import os
import re
import shutil

import pytest
import yaml

from conftest import REPO, loopback_only, path_env, run, trainspec_cmd, ts
from kube_schema import REFERENCE, validate_stream

pytestmark = [pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"the pinned Kubeflow files are not at {REFERENCE}"),
              pytest.mark.realproc]
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
                                reason="pods run in namespaces: needs root, iproute2 and util-linux")

from kube_pods import job_pods, run_pods  # noqa: E402


DDP = ("ddp", "python train.py --steps 2 --timeout 60", "pytorch", "")
# Lightning per node: the shim hands the pod's world to Lightning, which spawns its devices; checkpoints
# go to an output on a claim, as the code's ConfigMap is read-only
LIGHTNING = ("mnist", "python train.py --num_nodes {{ nodes }} --devices {{ procs_per_node }} --output "
             "{{ outputs.ckpt }}", "lightning", "outputs: {ckpt: {}}")
CLAIMS = "volumes: {ckpt: {pvc: {claim: runs, sub_path: mnist}}}"


def spec_file(tmp_path, api, launcher, procs, example=DDP, settings=CLAIMS, code=None):
    folder, command, framework, extra = example
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: k8s-run
code: {code or REPO / "examples" / folder}
command: {command}
framework: {framework}
{extra}
resources: {{nodes: 2, gpus_per_node: 0, procs_per_node: {procs}, shm_size: 64m}}
distribution: {{backend: gloo, launcher: {launcher}}}
environment: {{image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime}}
targets:
  kubernetes: {{api: {api}{", " + settings if "outputs" in extra else ""}}}
""")
    return spec


def compiled(tmp_path, api, launcher, procs, example=DDP):
    spec = spec_file(tmp_path, api, launcher, procs, example)
    proc = ts("compile", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "k8s-run" / "kubernetes" / "job.yaml").read_text()
    assert validate_stream(text) == []
    return [d for d in yaml.safe_load_all(text) if d]


@needs_root
@pytest.mark.parametrize("api, launcher, procs, example", [
    ("trainjob", "per-node", 2, DDP), ("trainjob", "per-process", 1, DDP), ("pytorchjob", "per-node", 2, DDP),
    ("pytorchjob", "per-process", 1, DDP), ("trainjob", "per-node", 2, LIGHTNING),
    ("pytorchjob", "per-node", 2, LIGHTNING)],
    ids=["trainjob-per-node-ddp", "trainjob-per-process-ddp", "pytorchjob-per-node-ddp", "pytorchjob-per-process-ddp",
         "trainjob-per-node-lightning", "pytorchjob-per-node-lightning"])
def test_every_rank_of_a_fit_agrees(tmp_path, api, launcher, procs, example):
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    if example is LIGHTNING:
        pytest.importorskip("lightning", reason="lightning is a test extra")
    docs = compiled(tmp_path, api, launcher, procs, example)
    claim = tmp_path / "claim-runs"
    claim.mkdir()
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", pvcs={"runs": claim}, timeout=240)
    assert result.ok, result.output
    ranks = sorted((json.loads(m) for out in result.output.values()
                    for m in re.findall(r"^TRAINSPEC_RESULT (\{.*\})$", out, re.M)), key=lambda r: r["rank"])
    world = 2 * procs
    assert [r["rank"] for r in ranks] == list(range(world)), result.output
    assert {(r["world_size"], r["allreduce"]) for r in ranks} == {(world, world)}
    assert [str(r["node_rank"]) for r in ranks] == [str(i // procs) for i in range(world)]
    # the master every rank used: the JobSet DNS name of node 0 / the operator's master Service, at its port
    master = "k8s-run-node-0-0.k8s-run:29500" if api == "trainjob" else "k8s-run-master-0:6105"
    assert {r["master"] for r in ranks} == {master}
    assert not os.path.exists("/trainspec")  # the mount points the run made are gone
    if example is LIGHTNING:  # outputs.ckpt's claim, at its sub-path, was Lightning's root dir
        assert (claim / "mnist").is_dir()


IO_CHECK = """import os, sys
data, out = sys.argv[1], sys.argv[2]
text = open(os.path.join(data, "hello.txt")).read()
try:
    open(os.path.join(data, "written"), "w")
    read_only = False
except OSError:
    read_only = True
with open(os.path.join(out, "node-%s.txt" % os.environ["NODE_RANK"]), "w") as f:
    f.write("%s %s %s" % (text, read_only, data))
"""
VOLUMES = ("io", "python io_check.py {{ inputs.data }} {{ outputs.result }}", "pytorch",
           "inputs: {data: {path: 'azureml://datastores/ds/paths/hello'}}\noutputs: {result: {}}")
IO_CLAIMS = "volumes: {data: {pvc: {claim: datasets, sub_path: hello}}, result: {pvc: {claim: runs}}}"


def io_code(tmp_path):
    code = tmp_path / "io"
    code.mkdir()
    (code / "io_check.py").write_text(IO_CHECK)
    return code


@needs_root
@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_inputs_and_outputs_on_claims_are_mounted_where_the_command_says(tmp_path, api):
    """An input read-only at /trainspec/inputs/<name> from its claim and sub-path, an output
    read-write at /trainspec/outputs/<name>: every pod reads the one and writes to the other, and
    what it wrote is on the claim after the pods are gone."""
    spec = spec_file(tmp_path, api, "per-process", 1, VOLUMES, IO_CLAIMS, io_code(tmp_path))
    proc = ts("compile", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "k8s-run" / "kubernetes" / "job.yaml").read_text()
    assert validate_stream(text) == []
    docs = [d for d in yaml.safe_load_all(text) if d]
    datasets, runs = tmp_path / "claim-datasets", tmp_path / "claim-runs"
    (datasets / "hello").mkdir(parents=True)
    (datasets / "hello" / "hello.txt").write_text("hi")
    runs.mkdir()
    result = run_pods(job_pods(docs), docs, workdir=tmp_path / "pods", pvcs={"datasets": datasets, "runs": runs},
                      timeout=120)
    assert result.ok, result.output
    assert sorted(p.name for p in runs.iterdir()) == ["node-0.txt", "node-1.txt"], result.output
    assert {p.read_text() for p in runs.iterdir()} == {"hi True /trainspec/inputs/data"}
    assert sorted(p.name for p in (datasets / "hello").iterdir()) == ["hello.txt"]  # nothing written to the input


def run_local(cwd, spec, *args):
    """`trainspec run --local -t kubernetes` in a loopback-only network namespace of its own when
    root, as tests/test_local_run.py runs it: its ranks' ports are then no other test's."""
    return run(loopback_only([*trainspec_cmd(), "run", "--local", spec, "-t", "kubernetes", *args]), cwd,
               env=path_env())


def test_run_local_makes_claims_folders_and_takes_an_input_path(tmp_path):
    """`run --local -t kubernetes`: an input on a claim is the --input folder, an output's claim
    a folder of the work directory; the command's paths point there."""
    data = tmp_path / "here"
    data.mkdir()
    (data / "hello.txt").write_text("local")
    spec = spec_file(tmp_path, "trainjob", "per-process", 1, VOLUMES, IO_CLAIMS, io_code(tmp_path))
    workdir = tmp_path / "work"
    proc = run_local(tmp_path, str(spec), "--input", f"data={data}", "--workdir", str(workdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = workdir / "claims" / "runs"
    assert sorted(p.name for p in written.iterdir()) == ["node-0.txt", "node-1.txt"], proc.stderr
    assert {p.read_text().split(" ")[0] for p in written.iterdir()} == {"local"}
    assert f"outputs.result: {written}" in proc.stderr and f"inputs.data: {data}" in proc.stderr


@pytest.mark.parametrize("api, launcher, procs", [("trainjob", "per-node", 2), ("pytorchjob", "per-process", 1)])
def test_run_local_plays_the_pods_with_kubeflows_variables(tmp_path, api, launcher, procs):
    """`run --local -t kubernetes`: job.yaml's pods on simulated nodes, the shim's Kubeflow detector
    reading what the controller sets, every rank agreeing."""
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    spec = spec_file(tmp_path, api, launcher, procs)
    proc = run_local(tmp_path, str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"kubeflow-{api} detected" in proc.stdout + proc.stderr
    ranks = sorted((json.loads(m) for m in re.findall(r"TRAINSPEC_RESULT (\{.*\})$", proc.stdout, re.M)),
                   key=lambda r: r["rank"])
    world = 2 * procs
    assert [r["rank"] for r in ranks] == list(range(world)), proc.stdout
    assert {(r["world_size"], r["allreduce"]) for r in ranks} == {(world, world)}
    assert len({r["master"] for r in ranks}) == 1
