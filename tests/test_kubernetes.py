"""The Kubernetes target as a cluster admin reads it: every document of both APIs valid against the
pinned CRDs as strict schemas (tests/kube_schema.py: CEL, webhooks, ConfigMap rules), the spec's
shape mapped as AKS wants it, settings errors located, hostile strings carried exactly, and plan,
diff and check showing the job."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, ts, yq
import kube_schema
from trainspec.runtime import shim_source


def spec(tmp_path, body="", settings="{}", command="python train.py --steps 3", name="job",
         resources="{nodes: 2, sku: Standard_ND96isr_H100_v5}", code=f"{REPO}/examples/ddp",
         environment="{image: 'pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime'}"):
    path = tmp_path / "spec.yaml"
    path.write_text(f"""version: 1
name: {name}
code: {code}
command: {command}
resources: {resources}
environment: {environment}
{body}
targets:
  kubernetes: {settings}
""", encoding="utf-8")
    return path


def compiled(tmp_path, **kw):
    proc = ts("compile", str(spec(tmp_path, **kw)), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "kubectl apply -f " in proc.stdout
    text = (tmp_path / "out" / kw.get("name", "job") / "kubernetes" / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []
    return list(yaml.safe_load_all(text))


def errors(tmp_path, **kw):
    proc = ts("compile", str(spec(tmp_path, **kw)), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
    return proc.stderr


def patched_pod(job):
    return job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]


SETTINGS = [
    "{}",
    "{namespace: ml, queue: team-a, timeout: 12h, service_account: trainer, image_pull_secrets: [acr-pull], "
    "node_selector: {agentpool: gpu}, tolerations: [{key: dedicated, value: ml, effect: NoSchedule}]}",
    "{code: {pvc: {claim: code, sub_path: team/mnist}}, rdma_resource: rdma/shared_ib}",
    "{code: {image: {path: /workspace}}}",
]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("settings", SETTINGS)
def test_every_document_of_both_apis_passes_the_strict_crd_validation(tmp_path, api, settings):
    settings = settings[:-1] + (", " if settings != "{}" else "") + f"api: {api}}}"
    docs = compiled(tmp_path, settings=settings)
    job = docs[-1]
    assert job["kind"] == ("TrainJob" if api == "trainjob" else "PyTorchJob")
    assert [d["kind"] for d in docs[:-1]] == ["ConfigMap"] * (len(docs) - 1)


def test_a_broken_document_fails_the_same_validation(tmp_path):
    """The validation above is not vacuous: nprocPerNode as an integer, an unknown key, fail it."""
    job = compiled(tmp_path, settings="{api: pytorchjob}")[-1]
    job["spec"]["nprocPerNode"] = 8
    assert kube_schema.validate(job)
    job = compiled(tmp_path, settings="{}")[-1]
    job["spec"]["trainer"]["workingDir"] = "/x"
    assert kube_schema.validate(job)


def test_the_shape_as_aks_wants_it_trainjob(tmp_path):
    docs = compiled(tmp_path, settings="{namespace: ml, queue: team-a, timeout: 2h}", resources="{nodes: 3, sku: Standard_ND96isr_H100_v5, shm_size: 16g}")
    shim, code, job = docs
    assert shim["metadata"]["name"] == "job-shim" and "trainspec_shim.py" in shim["data"]
    assert shim["data"] == {"trainspec_shim.py": shim_source("kubernetes")}  # Kubeflow's detectors joined in
    assert code["data"]["train.py"] == (REPO / "examples" / "ddp" / "train.py").read_text()
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and job["spec"]["suspend"] is True
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 8
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8, "rdma/ib": 1}}
    assert trainer["command"][:2] == ["bash", "-c"]
    line = shlex.split(trainer["command"][2])
    start = line.index("cd")  # after the copy of the code into the folder it starts in
    assert line[start:start + 3] == ["cd", "/trainspec/work", "&&"]
    assert line[start + 4:start + 9] == ["python3", "-I", "-S", "/trainspec/trainspec_shim.py", "--"]
    assert line[start + 9:start + 15] == ["torchrun", "--nnodes", "3", "--nproc_per_node", "8", "--no-python"]
    pod = patched_pod(job)
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5"}
    assert pod["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    container = pod["containers"][0]
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_the_command_starts_in_a_writable_copy_of_the_read_only_configmap(tmp_path, api):
    """Issue 41: the code ConfigMap is mounted read-only, so a command that writes ./outputs or
    lightning_logs/ would crash there; it starts in an emptyDir holding a copy of it. The copy runs
    here over a folder laid out as the kubelet mounts a ConfigMap (its files links into ..data, a
    link to ..<time>/ that holds them): the code's files, without the kubelet's own entries, and
    the command's writes land in the copy."""
    job = compiled(tmp_path, settings=f"{{api: {api}}}", command="python train.py")[-1]
    pod = patched_pod(job) if api == "trainjob" else job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/trainspec/code"]["readOnly"] is True and "configMap" in volumes[mounts["/trainspec/code"]["name"]]
    assert "readOnly" not in mounts["/trainspec/work"] and volumes[mounts["/trainspec/work"]["name"]]["emptyDir"] == {}
    command = job["spec"]["trainer"]["command"] if api == "trainjob" else container["command"]
    copy, rest = command[2].split(" && cd ", 1)
    assert rest.startswith("/trainspec/work && exec python3 -I -S /trainspec/trainspec_shim.py -- ")

    mounted, work = tmp_path / "mounted", tmp_path / "work"
    stamp = mounted / "..2026_12_07_20_00_00.1"
    (stamp / "sub").mkdir(parents=True)
    (stamp / "train.py").write_text("print(1)\n")
    (stamp / "sub" / "util.py").write_text("x = 1\n")
    (mounted / "..data").symlink_to(stamp.name)
    for name in ("train.py", "sub"):
        (mounted / name).symlink_to(f"..data/{name}")
    words = [str(mounted) if w == "/trainspec/code" else str(work) if w == "/trainspec/work" else w
             for w in shlex.split(copy)]
    words[0] = sys.executable
    done = subprocess.run(words, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["sub", "sub/util.py", "train.py"]
    assert not any(p.is_symlink() for p in work.rglob("*"))
    (work / "outputs").mkdir()  # the command's own files: the copy is writable
    (work / "train.py").write_text("edited in the pod\n")


def test_the_shape_as_aks_wants_it_pytorchjob(tmp_path):
    job = compiled(tmp_path, settings="{api: pytorchjob, queue: q}", resources="{nodes: 3, sku: Standard_NC24ads_A100_v4}")[-1]
    spec_ = job["spec"]
    assert spec_["nprocPerNode"] == "1"  # a string: the CRD rejects 1
    assert spec_["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert spec_["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec_["runPolicy"]["suspend"] is True
    container = spec_["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert "securityContext" not in container  # no InfiniBand on this size


def test_one_node_pytorchjob_has_no_workers(tmp_path):
    job = compiled(tmp_path, settings="{api: pytorchjob}", resources="{nodes: 1, sku: Standard_NC24ads_A100_v4}")[-1]
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_compiling_twice_gives_the_same_bytes(tmp_path):
    path = spec(tmp_path)
    for out in ("a", "b"):
        assert ts("compile", str(path), "-o", str(tmp_path / out), cwd=tmp_path).returncode == 0
    assert (tmp_path / "a/job/kubernetes/job.yaml").read_bytes() == (tmp_path / "b/job/kubernetes/job.yaml").read_bytes()


def test_a_name_that_is_no_dns_label_is_an_error_at_name_with_a_suggestion(tmp_path):
    err = errors(tmp_path, name="2k8s_ddp")
    assert re.search(r"spec\.yaml:2:\d+: error: name: '2k8s_ddp' cannot name a Kubernetes job", err), err
    assert "name: job-2k8s-ddp" in err


def test_reserved_pet_variables_are_an_error_at_their_key(tmp_path):
    err = errors(tmp_path, body="env: {PET_NNODES: '4', OK: x}")
    assert re.search(r"spec\.yaml:\d+:\d+: error: env\.PET_NNODES: PET_NNODES is set by Kubeflow", err), err


def test_a_code_folder_over_a_configmap_is_an_error_naming_the_alternatives(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    (code / "weights.bin").write_bytes(os.urandom(1100 * 1024))
    err = errors(tmp_path, code=str(code))
    assert re.search(r"error: code: the code folder holds \d+ bytes, more than a ConfigMap's 1 MiB", err), err
    assert "pvc" in err and "image" in err
    # the same folder from a claim compiles
    compiled(tmp_path, code=str(code), settings="{code: {pvc: {claim: code}}}")


def test_binary_files_travel_as_binary_data(tmp_path):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    (code / "pkg" / "blob.bin").write_bytes(b"\xff\x00\xfe")
    (code / ".git").mkdir()
    (code / ".git" / "HEAD").write_text("x")
    cm = compiled(tmp_path, code=str(code))[1]
    assert cm["data"] == {"train.py": "print(1)\n"}
    assert cm["binaryData"] == {"pkg_blob.bin": "/wD+"}
    items = compiled(tmp_path, code=str(code))[2]["spec"]["runtimePatches"][0]
    volumes = items["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["volumes"]
    code_volume = next(v for v in volumes if v["name"] == "trainspec-code")
    assert {"key": "pkg_blob.bin", "path": "pkg/blob.bin"} in code_volume["configMap"]["items"]


@pytest.mark.parametrize("environment, fragment", [
    ("{azureml: 'azureml:torch:1'}", "environment.azureml: kubernetes cannot express an Azure ML registered"),
    ("{conda_file: environment.yml}", "environment: a pod needs an image"),
])
def test_no_image_is_an_error(tmp_path, environment, fragment):
    (tmp_path / "environment.yml").write_text("name: x\n")
    assert fragment in errors(tmp_path, environment=environment)


@pytest.mark.parametrize("inputs, fragment", [
    ("{data: {path: 'azureml:mnist:1'}}", "inputs.data.path: kubernetes cannot express the remote data"),
    ("{data: {path: 'https://example.com/x'}}", "inputs.data.path: kubernetes cannot express the remote data"),
    ("{data: {path: data/mnist}}", "inputs.data.path: on Kubernetes an input is a path in the pod"),
])
def test_inputs_that_are_no_path_in_the_pod_are_located_errors(tmp_path, inputs, fragment):
    (tmp_path / "data" / "mnist").mkdir(parents=True)
    err = errors(tmp_path, body=f"inputs: {inputs}")
    assert fragment in err and "targets.kubernetes.volumes.data: {pvc: {claim: NAME" in err, err


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_inputs_and_outputs_on_claims_become_volumes_at_their_paths(tmp_path, api):
    """volumes: an input from a claim at a sub-path, read-only at /trainspec/inputs/<name>; an output
    read-write at /trainspec/outputs/<name>; the command's references are those paths; a remote
    input with a claim compiles (the claim holds its data here), and the documents stay valid."""
    body = ("inputs: {data: {path: 'azureml://datastores/ds/paths/mnist'}, Data: {path: /opt/in-image}}\n"
            "outputs: {ckpt: {}, logs: {path: 'azureml://datastores/ds/paths/logs'}}")
    settings = (f"{{api: {api}, volumes: {{data: {{pvc: {{claim: datasets, sub_path: mnist/v2}}}}, "
                "ckpt: {pvc: {claim: runs}}, logs: {pvc: {claim: runs, sub_path: logs}}}}")
    docs = compiled(tmp_path, body=body, settings=settings,
                    command="python train.py --data {{ inputs.data }} --other {{ inputs.Data }} "
                            "--out={{ outputs.ckpt }} --logs {{ outputs.logs }}")
    job = docs[-1]
    if api == "trainjob":
        pod, command = patched_pod(job), job["spec"]["trainer"]["command"][2]
    else:
        pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        command = pod["containers"][0]["command"][2]
    words = shlex.split(command)
    assert words[-7:] == ["--data", "/trainspec/inputs/data", "--other", "/opt/in-image",
                          "--out=/trainspec/outputs/ckpt", "--logs", "/trainspec/outputs/logs"], command
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["in-data"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert mounts["in-data"] == {"name": "in-data", "mountPath": "/trainspec/inputs/data", "subPath": "mnist/v2",
                                 "readOnly": True}
    assert volumes["out-ckpt"]["persistentVolumeClaim"] == {"claimName": "runs"}
    assert mounts["out-ckpt"] == {"name": "out-ckpt", "mountPath": "/trainspec/outputs/ckpt"}
    assert mounts["out-logs"]["subPath"] == "logs" and "readOnly" not in mounts["out-logs"]
    assert not any("emptyDir" in v for v in pod["volumes"] if v["name"] not in ("dshm", "trainspec-work"))


def test_two_names_that_differ_in_case_get_two_volumes(tmp_path):
    docs = compiled(tmp_path, body="outputs: {Out: {}, out: {}}",
                    settings="{volumes: {Out: {pvc: {claim: a}}, out: {pvc: {claim: b}}}}")
    volumes = [v for v in patched_pod(docs[-1])["volumes"] if "persistentVolumeClaim" in v]
    assert [(v["name"], v["persistentVolumeClaim"]["claimName"]) for v in volumes] == [("out-out", "a"),
                                                                                        ("out-out-1", "b")]


def test_an_output_without_a_volume_is_an_error_at_its_key(tmp_path):
    """Written into the pod's own disk, it would be gone with the pod: an error that says how to
    keep it; an output at an absolute path (a volume the cluster mounts there) compiles."""
    err = errors(tmp_path, body="outputs:\n  ckpt: {}")
    assert re.search(r"spec\.yaml:\d+:3: error: outputs\.ckpt: it has no location on kubernetes: what the job "
                     r"writes would stay in the pod", err), err
    assert "targets.kubernetes.volumes.ckpt: {pvc: {claim: NAME, sub_path: DIR}}" in err
    compiled(tmp_path, body="outputs:\n  ckpt: {path: /mnt/shared/ckpt}")


@pytest.mark.parametrize("body, settings, where, fragment", [
    ("inputs: {data: {path: /d}}", "{volumes: {dta: {pvc: {claim: c}}}}", "targets.kubernetes.volumes.dta",
     "'dta' is neither an input nor an output of this spec (hint: did you mean 'data'?)"),
    ("", "{volumes: {data: {pvc: {claim: c}}}}", "targets.kubernetes.volumes.data",
     "its inputs and outputs: none"),
    ("inputs: {epochs: 5}", "{volumes: {epochs: {pvc: {claim: c}}}}", "targets.kubernetes.volumes.epochs",
     "inputs.epochs is a literal value"),
    ("inputs: {data: {path: /d}}", "{volumes: {data: {pvc: {claim: c, sub_path: a/../../b}}}}",
     "targets.kubernetes.volumes.data.pvc.sub_path", "leaves the claim"),
    ("inputs: {data: {path: /d}}", "{volumes: {data: {pvc: {claim: Big_Claim}}}}",
     "targets.kubernetes.volumes.data.pvc.claim", "is not a Kubernetes name"),
    ("inputs: {data: {path: /d}}", "{volumes: {data: {claim: c}}}", "targets.kubernetes.volumes.data",
     "claim"),
])
def test_volume_errors_are_located(tmp_path, body, settings, where, fragment):
    err = errors(tmp_path, body=body, settings=settings)
    assert re.search(r"spec\.yaml:\d+:\d+: error: " + re.escape(where), err), err
    assert fragment in err, err


@pytest.mark.parametrize("settings, where", [
    ("{api: tfjob}", "targets.kubernetes.api"),
    ("{namespace: ML_Team}", "targets.kubernetes.namespace"),
    ("{queue: 'a b'}", "targets.kubernetes.queue"),
    ("{runtime: 'Torch'}", "targets.kubernetes.runtime"),
    ("{image_pull_secrets: [Bad_Secret]}", "targets.kubernetes.image_pull_secrets[0]"),
    ("{node_selector: {'bad key!': x}}", "targets.kubernetes.node_selector"),
    ("{node_selector: {ok: 'bad value!'}}", "targets.kubernetes.node_selector.ok"),
    ("{tolerations: [{effect: Sometimes}]}", "targets.kubernetes.tolerations[0].effect"),
    ("{code: {pvc: {claim: c, sub_path: ../x}}}", "targets.kubernetes.code.pvc.sub_path"),
    ("{code: {pvc: {claim: c}, image: {path: /x}}}", "targets.kubernetes.code"),
    ("{code: {image: {path: relative}}}", "targets.kubernetes.code.image.path"),
    ("{rdma_resource: 'RDMA IB'}", "targets.kubernetes.rdma_resource"),
    ("{timeout: soon}", "targets.kubernetes.timeout"),
    ("{python: ''}", "targets.kubernetes.python"),
    ("{colour: blue}", "targets.kubernetes.colour"),
])
def test_settings_errors_are_located(tmp_path, settings, where):
    err = errors(tmp_path, settings=settings)
    assert re.search(r"spec\.yaml:\d+:\d+: error: " + re.escape(where), err), err


HOSTILE = ['<tag attr="v">&amp;</tag>', "'; DROP TABLE x; --", "$(touch pwned) `id` ${HOME} $HOME",
           "a && b || c ; d | e > f < g 2>&1", "key: value # not a comment", "&anchor *alias !!python/object/apply:os.system",
           "---", "...", "null", "yes", "0o17", "\u202eevil\u202c", "😀👩‍👩‍👧‍👦", "\u2028line sep\u2029",
           "two\nlines", "bell\x07", "esc\x1b[31mred", "crlf\r\nline", "nel\x85", "nonchar\ufffe", "trailing\n"]


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_hostile_strings_stay_valid_yaml_and_the_same_data(tmp_path, api):
    """Env values and command arguments come back exactly (PyYAML, as kubectl's YAML reader reads
    them; the argv after bash runs the container's command), and the documents stay valid."""
    env = {f"K{i}": s for i, s in enumerate(HOSTILE)}
    args = [w for s in HOSTILE for w in ("--a", s)]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (bin_dir / "python3").chmod(0o755)
    path = spec(tmp_path, command=yq(shlex.join(["python", "train.py", *args])),
                body="env: {" + ", ".join(f"{k}: {yq(v)}" for k, v in env.items()) + "}\ndescription: "
                + yq(" | ".join(HOSTILE)), settings=f"{{api: {api}, code: {{image: {{path: {yq(str(tmp_path))}}}}}}}")
    proc = ts("compile", str(path), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "job" / "kubernetes" / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []
    job = list(yaml.safe_load_all(text))[-1]
    container = (job["spec"]["trainer"] if api == "trainjob"
                 else job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0])
    got = {e["name"]: e["value"] for e in container["env"]}
    assert {k: got[k] for k in env} == env
    run = subprocess.run(container["command"], capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert run.returncode == 0, run.stderr
    argv = json.loads(run.stdout)
    assert argv[argv.index("--no-python") + 2:] == ["train.py", *args]


def test_plan_diff_and_check_show_the_job(tmp_path):
    plan = json.loads(ts("plan", "specs/k8s-ddp.yaml", "-t", "kubernetes", "--format", "json", cwd=REPO).stdout)
    target = plan["jobs"][0]["targets"][0]
    text = json.dumps(target)
    assert target["target"] == "kubernetes" and target["submit"] == "kubectl apply -f build/k8s-ddp/kubernetes/job.yaml"
    assert target["settings"]["job"] == "TrainJob trainer.kubeflow.org/v1alpha1", text
    assert target["facts"]["where"] == "namespace ml, Kueue local queue team-a (created suspended: Kueue admits it)"
    assert target["ranks"]["last"]["PET_NODE_RANK"] == "1" and target["ranks"]["last"]["MASTER_PORT"] == "29500", text
    changed = tmp_path / "k8s-ddp.yaml"
    changed.write_text((REPO / "specs" / "k8s-ddp.yaml").read_text().replace("timeout: 12h", "timeout: 13h")
                       .replace("../examples/ddp", str(REPO / "examples" / "ddp")))
    diff = ts("diff", "specs/k8s-ddp.yaml", str(changed), "-t", "kubernetes", cwd=REPO)
    assert "-  activeDeadlineSeconds: 43200" in diff.stdout and "+  activeDeadlineSeconds: 46800" in diff.stdout, \
        diff.stdout + diff.stderr
    check = ts("check", "specs/k8s-ddp.yaml", "-t", "kubernetes", "-o", "tests/golden", cwd=REPO)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_golden_job_is_valid():
    text = (REPO / "tests" / "golden" / "k8s-ddp" / "kubernetes" / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []


# --- plan, diff and check as a reviewer and a cluster admin read them ------------------------------

ADMIN = ("{namespace: ml, queue: team-a, timeout: 1h30m, service_account: trainer, image_pull_secrets: [acr-pull], "
         "node_selector: {agentpool: gpu}, tolerations: [{key: dedicated, value: ml, effect: NoSchedule}, "
         "{key: spot, operator: Exists}], code: {pvc: {claim: code, sub_path: team/mnist}}, "
         "volumes: {checkpoints: {pvc: {claim: runs, sub_path: mnist}}}")


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_plan_shows_what_an_admin_checks_before_kubectl_apply(tmp_path, api):
    path = spec(tmp_path, settings=ADMIN + f", api: {api}}}", resources="{nodes: 3, sku: Standard_ND96isr_H100_v5, "
                "shm_size: 16g}", body="outputs:\n  checkpoints: {}")
    plan = json.loads(ts("plan", str(path), "--format", "json", cwd=tmp_path, check=True).stdout)
    settings = plan["jobs"][0]["targets"][0]["settings"]
    facts = plan["jobs"][0]["targets"][0]["facts"]
    assert facts == {  # every target's, in the same order
        "where": "namespace ml, Kueue local queue team-a (created suspended: Kueue admits it)",
        "time limit": "1h30m (activeDeadlineSeconds 5400), from targets.kubernetes.timeout",
        "priority": "the cluster's default priority class",
        "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
        "GPUs": "24 x H100 (3 nodes x 8)",
    }
    pods = "3 (one per node)" if api == "trainjob" else "3 (Master 1 + Worker 2)"
    assert settings == {
        "job": "TrainJob trainer.kubeflow.org/v1alpha1" if api == "trainjob" else "PyTorchJob kubeflow.org/v1",
        "pods": pods + ", each with limits nvidia.com/gpu=8, rdma/ib=1",
        "capabilities": "IPC_LOCK",
        "node selector": "node.kubernetes.io/instance-type=Standard_ND96isr_H100_v5, agentpool=gpu",
        "tolerations": "sku=gpu:NoSchedule, dedicated=ml:NoSchedule, spot (any value, any effect)",
        "service account": "trainer",
        "image pull secrets": "acr-pull",
        "code": "at /trainspec/code (volume trainspec-code)",
        "volume trainspec-shim": "ConfigMap job-shim (trainspec_shim.py) at /trainspec/trainspec_shim.py "
                                 "(sub-path trainspec_shim.py, read-only)",
        "volume trainspec-code": "PVC code at /trainspec/code (sub-path team/mnist)",
        "volume dshm": "emptyDir in memory (at most 16Gi) at /dev/shm",
        "volume out-checkpoints": "PVC runs at /trainspec/outputs/checkpoints (sub-path mnist)",
        "outputs.checkpoints": "/trainspec/outputs/checkpoints",  # where the command finds it
        "shim": "python3 -I -S trainspec_shim.py (needs Python 3.8+)",
    }, settings
    # read from the job.yaml compile writes: the same image, limits, volumes
    assert ts("compile", str(path), "-o", str(tmp_path / "out"), cwd=tmp_path).returncode == 0
    job = list(yaml.safe_load_all((tmp_path / "out" / "job" / "kubernetes" / "job.yaml").read_text()))[-1]
    pod = (patched_pod(job) if api == "trainjob" else job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"])
    assert sorted(k[len("volume "):] for k in settings if k.startswith("volume ")) == sorted(
        v["name"] for v in pod["volumes"])
    text = ts("plan", str(path), cwd=tmp_path, check=True).stdout
    markdown = ts("plan", str(path), "--format", "markdown", cwd=tmp_path, check=True).stdout
    for key, value in [*facts.items(), *settings.items()]:
        assert f"\n  {key}: {value}\n" in text and f"\n- {key}: `{value}`\n" in markdown, key


def test_plan_of_a_plain_job_says_what_it_does_not_set(tmp_path):
    path = spec(tmp_path, resources="{nodes: 1, gpus_per_node: 0}", settings="{code: {image: {path: /workspace}}}")
    target = json.loads(ts("plan", str(path), "--format", "json", cwd=tmp_path, check=True).stdout)[
        "jobs"][0]["targets"][0]
    settings, facts = target["settings"], target["facts"]
    assert settings["pods"] == "1 (one per node), no resource limits"
    assert facts["where"] == "kubectl's current namespace, no queue (the pods are scheduled at once)"
    assert settings["code"] == "in the image, at /workspace"
    assert facts["time limit"] == "none: runs until it ends (the spec's timeout, or targets.kubernetes.timeout, sets one)"
    assert not {"namespace", "queue", "deadline", "capabilities", "node selector", "tolerations", "service account", "image pull secrets",
                "volume trainspec-code"} & set(settings)


def k8s_repo(tmp_path):
    """A repository with specs/k8s-ddp.yaml, its code, and its job.yaml committed."""
    from conftest import git

    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "k8s-ddp.yaml").write_text((REPO / "specs" / "k8s-ddp.yaml").read_text())
    (root / "examples" / "ddp").mkdir(parents=True)
    for name in ("train.py", "environment.yml"):
        (root / "examples" / "ddp" / name).write_bytes((REPO / "examples" / "ddp" / name).read_bytes())
    git("init", "-q", "-b", "main", cwd=root)
    ts("compile", "specs/", "-o", "build/", cwd=root, check=True)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "a Kubernetes job", cwd=root)
    return root


def test_a_timeout_change_is_that_hunk_and_the_runtime_files_one_line_each(tmp_path):
    from conftest import edit

    root = k8s_repo(tmp_path)
    edit(root / "specs" / "k8s-ddp.yaml", "timeout: 12h", "timeout: 13h")
    diff = ts("diff", "--git", "HEAD", "specs/", cwd=root, check=True).stdout
    changed = [line for line in diff.splitlines() if line.startswith(("+", "-")) and line[:3] not in ("+++", "---")]
    assert changed[2:] == ["-  activeDeadlineSeconds: 43200", "+  activeDeadlineSeconds: 46800"], diff
    assert all("Generated by trainspec" in line for line in changed[:2])  # the header's spec sha256
    assert diff.count("@@ ") == 2 and "def detect" not in diff
    assert "job.yaml#" not in diff and "unchanged" not in diff  # the unchanged runtime files: not listed


@pytest.mark.parametrize("old, new", [
    ("    numNodes: 2\n", "    numNodes: 3\n"),  # the TrainJob
    ("    class TrainJob(Detector):\n", "    class TrainJob(Detector):  # tuned\n"),  # one line of the embedded shim
], ids=["trainjob", "embedded-shim"])
def test_check_and_diff_see_a_hand_edit_anywhere_in_job_yaml(tmp_path, old, new):
    from conftest import edit

    root = k8s_repo(tmp_path)
    job = root / "build" / "k8s-ddp" / "kubernetes" / "job.yaml"
    assert ts("check", "specs/", "-o", "build", cwd=root).returncode == 0
    edit(job, old, new)
    check = ts("check", "specs/", "-o", "build", cwd=root)
    assert check.returncode == 1 and f"{job.relative_to(root)}: hand-edited" in check.stdout + check.stderr, \
        check.stdout + check.stderr
    diff = ts("diff", "--git", "HEAD", "specs/", cwd=root, check=True).stdout
    assert "committed outputs differ from what the spec compiles to" in diff
    assert "build/k8s-ddp/kubernetes/job.yaml" in diff.split("\n")[1], diff


@pytest.mark.parametrize("api, nodes, room, derived", [
    ("trainjob", 2, 48, "pod"), ("trainjob", 16, 47, "pod"), ("pytorchjob", 2, 54, "Service"),
    ("pytorchjob", 1, 54, "Service"), ("pytorchjob", 12, 53, "Service")])
def test_a_name_whose_derived_names_pass_63_characters_is_an_error_with_the_room_left(tmp_path, api, nodes, room,
                                                                                        derived):
    """JobSet's webhook refuses a TrainJob whose pods would be named over 63 characters
    (<job>-node-0-<index>-xxxxx), the API server the PyTorchJob's Service <job>-worker-<index>:
    a name one character too long is an error at name: saying how long it may be; the longest
    that fits compiles to documents the same checks accept."""
    settings = f"{{api: {api}}}"
    resources = f"{{nodes: {nodes}, gpus_per_node: 0}}"
    err = errors(tmp_path, name="a" * (room + 1), settings=settings, resources=resources)
    assert re.search(rf"spec\.yaml:2:7: error: name: '{'a' * (room + 1)}' is too long for this job: the controller "
                     rf"names the {derived} '", err), err
    assert f"(hint: at most {room} characters here, e.g. name: {'a' * room})" in err
    compiled(tmp_path, name="a" * room, settings=settings, resources=resources)  # and validate_stream passes it
    longer = (tmp_path / "out" / ("a" * room) / "kubernetes" / "job.yaml").read_text().replace(
        f"name: {'a' * room}\n", f"name: {'a' * (room + 1)}\n")
    assert any("exceed" in e or "exceeds 63" in e for e in kube_schema.validate_stream(longer))
