"""Data and checkpoints by name on every target (issue 28): one spec names an Azure ML data asset
for Azure ML and, through `targets.<target>.volumes`, where the same data is on Slurm, HPC Pack,
Ray and Kubernetes; `{{ inputs.corpus }}` / `{{ outputs.ckpt }}` are that location there. Each
output is checked with the tool that consumes it (azure-ai-ml's load_job, the HPC Pack XSD, Ray's
validation, bash and shlex for Slurm); what would be lost or unreachable is an error at its line.
(Real runs: tests/test_slurm_cluster.py, tests/test_kubernetes_run.py.)"""

import json
import re
import shlex
import subprocess

import pytest
import yaml

from conftest import REPO, ray_validate, slurm_image, ts

CORPUS, CKPT = "/shared/datasets/sft", "/shared/checkpoints/ft"
ABFSS = "abfss://data@team.dfs.core.windows.net/sft"
VOLUMES = {
    "slurm": f"volumes: {{corpus: {{path: {CORPUS}}}, ckpt: {{path: {CKPT}}}}}",
    "hpcpack": f"shared_dir: /app, volumes: {{corpus: {{path: {CORPUS}}}, ckpt: {{path: {CKPT}}}}}",
    "ray": f"location: eastus, resource_group: rg, volumes: {{corpus: {{path: '{ABFSS}'}}, ckpt: {{path: /mnt/ckpt}}}}",
    "kubernetes": "volumes: {corpus: {pvc: {claim: datasets, sub_path: sft}}, ckpt: {pvc: {claim: runs}}}",
}
# what each target needs besides its volumes (no volume: the data asset and the output have no place)
BARE = {"slurm": "{}", "hpcpack": "{shared_dir: /app}", "ray": "{location: eastus, resource_group: rg}",
        "kubernetes": "{}"}


def spec(tmp_path, targets, *, inputs="corpus: {path: 'azureml:sft@latest'}", outputs="ckpt: {}",
         image="nvcr.io/nvidia/pytorch:24.08-py3", name="ft"):
    """The issue's fine-tune: a data asset, a checkpoint output, 2 x 8 H100."""
    path = tmp_path / f"{name}.yaml"
    lines = "\n".join(f"  {target}: {settings}" for target, settings in targets.items())
    path.write_text(f"""version: 1
name: {name}
code: {REPO}/examples/ddp
command: python train.py --data {{{{ inputs.corpus }}}} --output {{{{ outputs.ckpt }}}}
resources: {{nodes: 2, sku: Standard_ND96isr_H100_v5}}
environment: {{image: {image}}}
inputs: {{{inputs}}}
outputs: {{{outputs}}}
targets:
{lines}
""")
    return path


def everywhere(**override):
    targets = {"azureml": "{compute: gpu-cluster}", **{t: "{" + v + "}" for t, v in VOLUMES.items()}}
    targets.update(override)
    return targets


def compile_ok(tmp_path, path):
    proc = ts("compile", str(path), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "out" / path.stem


def errors(tmp_path, path, *targets):
    args = [a for t in targets for a in ("-t", t)]
    proc = ts("validate", str(path), *args, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr


def test_one_spec_puts_the_data_where_each_platform_has_it(tmp_path):
    out = compile_ok(tmp_path, spec(tmp_path, everywhere(slurm="{container_image: 'nvcr.io#nvidia/pytorch:24.08-py3', "
                                                         + VOLUMES["slurm"] + "}")))
    # Azure ML keeps its data asset and its own output, read by azure-ai-ml as a job
    from azure.ai.ml import load_job

    job = load_job(out / "azureml" / "job.yml")
    assert job.inputs["corpus"].path in ("azureml:sft@latest", "sft@latest")  # azure-ai-ml strips azureml:
    assert "--data ${{inputs.corpus}} --output ${{outputs.ckpt}}" in job.command
    # Slurm: the paths on the shared storage, the output's folder made, both mounted in the container
    script = (out / "slurm" / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    srun = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    assert srun[-4:] == ["--data", CORPUS, "--output", CKPT]
    mounts = next(w for w in srun if w.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    assert mounts == ["$job_dir:$job_dir", "$work_dir:$work_dir", f"{CORPUS}:{CORPUS}:ro", f"{CKPT}:{CKPT}"]
    assert f"mkdir -p -- {CKPT}" in script.splitlines()
    # HPC Pack: the same paths in every task's command line
    xml = (out / "hpcpack" / "job.xml").read_text()
    assert f"--data {CORPUS} --output {CKPT}" in xml
    # Ray: the URL the code reads itself, the mounted path in the container (and Ray accepts the docker block)
    request = json.loads((out / "ray" / "trainspec_ray_job.json").read_text())
    assert request["command"].endswith(f"--data {ABFSS} --output /mnt/ckpt")
    config = yaml.safe_load((out / "ray" / "cluster.yaml").read_text())
    assert "--volume=/mnt/ckpt:/mnt/ckpt" in config["docker"]["run_options"]
    assert not any(key.endswith("inputs/corpus") for key in config["file_mounts"])  # nothing uploaded
    pytest.importorskip("ray", reason="ray is a test extra")
    ray_validate(config)
    # Kubernetes: where the claims are mounted
    assert "--data /trainspec/inputs/corpus --output /trainspec/outputs/ckpt" in (out / "kubernetes" /
                                                                                 "job.yaml").read_text()


@pytest.mark.parametrize("target", ["slurm", "hpcpack", "ray"])
def test_a_data_asset_without_a_volume_is_an_error_whose_hint_names_the_volume(tmp_path, target):
    """The hint names targets.<target>.volumes.corpus, not an absolute path (which Azure ML would refuse)."""
    err = errors(tmp_path, spec(tmp_path, {"azureml": "{}", target: BARE[target]}, outputs="ckpt: {path: /o}"
                                if target != "ray" else f"ckpt: {{path: '{ABFSS}'}}"), target)
    assert re.search(rf"ft\.yaml:7:25: error: inputs\.corpus\.path: {target} cannot express .*azureml:sft@latest", err), err
    assert f"targets.{target}.volumes.corpus: {{path: " in err, err
    assert "absolute path" not in err.split("inputs.corpus.path")[1].split("\n")[0]


@pytest.mark.parametrize("target, lost", [
    ("slurm", "would land in the compiled job folder (build/<name>/slurm/), the folder the repository commits"),
    ("ray", "would stay on a VM that `ray down` deletes"),
    ("kubernetes", "would stay in the pod and be lost with it"),
])
def test_an_output_with_no_location_is_an_error_at_its_key_where_it_would_be_lost(tmp_path, target, lost):
    err = errors(tmp_path, spec(tmp_path, {target: BARE[target]}, inputs="corpus: {path: /d}"), target)
    assert re.search(rf"ft\.yaml:8:11: error: outputs\.ckpt: it has no location on {target}: what the job writes " + re.escape(lost),
                     err), err
    assert f"targets.{target}.volumes.ckpt: " in err
    # a volume keeps it, and so does an absolute path (storage the nodes mount)
    compile_ok(tmp_path, spec(tmp_path, {target: "{" + VOLUMES[target] + "}"}, inputs="corpus: {path: /d}",
                              name="kept"))
    if target != "kubernetes":
        compile_ok(tmp_path, spec(tmp_path, {target: BARE[target]}, inputs="corpus: {path: /d}",
                                  outputs="ckpt: {path: /shared/ckpt}", name="absolute"))


def test_hpcpack_keeps_an_output_without_a_location_on_its_shared_storage(tmp_path):
    """shared_dir is the cluster's storage, not the compiled folder: the default is kept there."""
    out = compile_ok(tmp_path, spec(tmp_path, {"hpcpack": BARE["hpcpack"]}, inputs="corpus: {path: /d}"))
    assert "--output /app/outputs/ft/$CCP_JOBID/ckpt" in (out / "hpcpack" / "job.xml").read_text()


def test_a_relative_output_on_ray_is_an_error_and_a_storage_url_is_kept(tmp_path):
    err = errors(tmp_path, spec(tmp_path, {"ray": BARE["ray"]}, inputs="corpus: {path: /d}",
                                outputs="ckpt: {path: runs/ckpt}"), "ray")
    assert re.search(r"ft\.yaml:8:24: error: outputs\.ckpt\.path: on Ray 'runs/ckpt' is no place", err), err
    out = compile_ok(tmp_path, spec(tmp_path, {"ray": BARE["ray"]}, inputs="corpus: {path: /d}",
                                    outputs="ckpt: {path: 's3://runs/ft'}", name="url"))
    assert json.loads((out / "ray" / "trainspec_ray_job.json").read_text())["command"].endswith("--output s3://runs/ft")


@pytest.mark.parametrize("target", ["slurm", "hpcpack", "ray", "kubernetes"])
@pytest.mark.parametrize("volumes, inputs, fragment", [
    ("{crpus: VOLUME}", "corpus: {path: /d}", "'crpus' is neither an input nor an output of this spec (hint: did "
     "you mean 'corpus'?)"),
    ("{epochs: VOLUME}", "corpus: {path: /d}, epochs: 5", "inputs.epochs is a literal value"),
])
def test_each_volume_names_an_input_or_output_with_data_on_every_target(tmp_path, target, volumes, inputs, fragment):
    """One rule (trainspec/core/volumes.py) for every target with volumes."""
    volume = "{pvc: {claim: c}}" if target == "kubernetes" else "{path: /x}"
    settings = BARE[target][:-1] + (", " if BARE[target] != "{}" else "") + "volumes: " + volumes.replace(
        "VOLUME", volume) + "}"
    err = errors(tmp_path, spec(tmp_path, {target: settings}, inputs=inputs, outputs="ckpt: {path: /o}"), target)
    name = re.search(r"\{(\w+):", volumes).group(1)
    assert re.search(rf"ft\.yaml:\d+:\d+: error: targets\.{target}\.volumes\.{name}: ", err), err
    assert fragment in err, err


@pytest.mark.parametrize("target, path, words", [
    ("slurm", "shared/data", "is not an absolute path on the nodes"),
    ("hpcpack", "data", "is not an absolute path on the nodes"),
    ("ray", "https://example.com/data", "is neither an absolute path on the nodes nor a storage URL"),
    ("slurm", "/shared/../etc", "climbs with .."),
])
def test_a_volume_path_the_target_cannot_use_is_an_error_at_it(tmp_path, target, path, words):
    settings = BARE[target][:-1] + (", " if BARE[target] != "{}" else "") + f"volumes: {{corpus: {{path: '{path}'}}}}}}"
    err = errors(tmp_path, spec(tmp_path, {target: settings}, outputs="ckpt: {path: /o}"), target)
    assert re.search(rf"ft\.yaml:\d+:\d+: error: targets\.{target}\.volumes\.corpus\.path: ", err), err
    assert words in err, err


def test_slurm_mounts_are_quoted_and_a_location_pyxis_cannot_mount_is_an_error(tmp_path):
    odd = "/shared/my data/it's $HOME"
    out = compile_ok(tmp_path, spec(tmp_path, {"slurm": f"{{container_image: img, volumes: {{corpus: {{path: \"{odd}\"}}, "
                                                         "ckpt: {path: /o}}}"}))
    script = (out / "slurm" / "job.sbatch").read_text()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    line = next(line for line in script.splitlines() if line.startswith("srun "))
    # what bash hands srun: the odd path intact, read-only, next to the job's own folders
    echoed = subprocess.run(["bash", "-c", "job_dir=/j; work_dir=/c; printf '%s\\n' " + line.split(" ", 1)[1]
                             .split(" python3 ")[0]], capture_output=True, text=True).stdout.splitlines()
    assert f"--container-mounts=/j:/j,/c:/c,{odd}:{odd}:ro,/o:/o" in echoed, echoed
    err = errors(tmp_path, spec(tmp_path, {"slurm": "{container_image: img, volumes: {corpus: {path: '/a,b'}, "
                                                    "ckpt: {path: '/c:d'}}}"}, name="bad"), "slurm")
    assert re.search(r"bad\.yaml:\d+:\d+: error: targets\.slurm\.volumes\.corpus\.path: '/a,b' holds , or :", err), err
    assert "targets.slurm.volumes.ckpt.path: '/c:d' holds , or :" in err


def test_environment_image_alone_runs_in_a_container_with_the_data_mounted(tmp_path):
    """The mounts follow the job into whatever container it runs in: environment.image (in enroot's
    form) as much as an override."""
    out = compile_ok(tmp_path, spec(tmp_path, {"slurm": "{" + VOLUMES["slurm"] + "}"}))
    script = (out / "slurm" / "job.sbatch").read_text()
    words = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    assert slurm_image(script) == "nvcr.io#nvidia/pytorch:24.08-py3"
    assert next(w for w in words if w.startswith("--container-mounts=")).split(",")[2:] == [
        f"{CORPUS}:{CORPUS}:ro", f"{CKPT}:{CKPT}"]


def test_without_a_container_slurm_mounts_nothing_but_makes_the_output_folder(tmp_path):
    out = compile_ok(tmp_path, spec(tmp_path, {"slurm": "{container: false, " + VOLUMES["slurm"] + "}"}))
    script = (out / "slurm" / "job.sbatch").read_text()
    assert "--container-mounts" not in script and f"mkdir -p -- {CKPT}" in script
    assert "outputs/\"$SLURM_JOB_ID\"" not in script  # the old default in the job folder is gone


def test_a_slurm_container_mounts_the_specs_own_absolute_paths_too(tmp_path):
    """Without a volume, an input's or output's own absolute path is its place on the cluster: the
    container gets it too (it used to get only the job and code folders)."""
    out = compile_ok(tmp_path, spec(tmp_path, {"slurm": "{container_image: img}"}, inputs="corpus: {path: /data/sft}",
                                    outputs="ckpt: {path: /runs/ft}"))
    line = next(line for line in (out / "slurm" / "job.sbatch").read_text().splitlines() if line.startswith("srun "))
    mounts = next(w for w in shlex.split(line) if w.startswith("--container-mounts=")).split(",")
    assert mounts[2:] == ["/data/sft:/data/sft:ro", "/runs/ft:/runs/ft"]


def test_plan_says_where_each_target_finds_the_data(tmp_path):
    """Per target, the place its job uses (rendered as its command is), never the data asset on a
    target that reads it elsewhere."""
    path = spec(tmp_path, everywhere())
    proc = ts("plan", str(path), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    targets = {t["target"]: t for t in json.loads(proc.stdout)["jobs"][0]["targets"]}
    places = {name: (t["settings"].get("inputs.corpus"), t["settings"].get("outputs.ckpt"))
              for name, t in targets.items()}
    assert places == {"azureml": (None, None), "slurm": (CORPUS, CKPT), "hpcpack": (CORPUS, CKPT),
                      "ray": (ABFSS, "/mnt/ckpt"),
                      "kubernetes": ("/trainspec/inputs/corpus", "/trainspec/outputs/ckpt")}
    for name, (corpus, ckpt) in places.items():
        if corpus:
            assert f"--data {corpus} --output {ckpt}" in targets[name]["command"]
