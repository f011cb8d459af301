"""HPC Pack target: job XML that the scheduler's schema and reader accept, command lines that
survive XML and bash exactly, and every spec field HPC Pack cannot honour reported by name."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SPECS, trainspec_cmd

lxml = pytest.importorskip("lxml.etree", reason="lxml is a test extra: pip install -e '.[test]'")

XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
NS = {"j": "http://schemas.microsoft.com/HPCS2008R2/scheduler/"}


def compile_xml(spec: Path, tmp_path: Path) -> Path:
    proc = subprocess.run([*trainspec_cmd(), "compile", str(spec), "-t", "hpcpack", "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return next(tmp_path.glob("*/hpcpack/job.xml"))


def write_spec(tmp_path: Path, command: str, env: str = "{NCCL_DEBUG: WARN}", extra: str = "") -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: hostile
code: {REPO}/examples/ddp
command: {command}
resources: {{nodes: 3, gpus_per_node: 2}}
env: {env}
targets:
  hpcpack:
    shared_dir: /shared/jobs
    python: /opt/conda/bin/python
{extra}""")
    return spec


@pytest.fixture(scope="module")
def schema():
    if not XSD.exists():
        pytest.skip(f"the HPC Pack XSD is not here ({XSD}): it lives in the shared reference, never in this repo")
    return lxml.XMLSchema(lxml.parse(str(XSD)))


def test_seed_job_validates_against_the_scheduler_xsd(tmp_path, schema):
    job = compile_xml(SPECS / "hpcpack-ddp.yaml", tmp_path)
    doc = lxml.parse(str(job))
    schema.assertValid(doc)
    root = doc.getroot()
    assert root.tag == "{%s}Job" % NS["j"] and root.get("Version") == "3.000"
    # whole nodes, exclusive, fail together (hpcpack.md §2)
    assert (root.get("UnitType"), root.get("MinNodes"), root.get("MaxNodes")) == ("Node", "2", "2")
    assert root.get("IsExclusive") == "true" and root.get("FailOnTaskFailure") == "true"
    assert root.get("AutoCalculateMin") == root.get("AutoCalculateMax") == "false"
    tasks = root.findall("j:Tasks/j:Task", NS)
    assert len(tasks) == 2
    for i, task in enumerate(tasks):
        assert (task.get("MinNodes"), task.get("MaxNodes"), task.get("Type")) == ("1", "1", "Basic")
        assert task.get("WorkDirectory") == "/app/hpcpack-ddp/code"
        assert task.get("StdOutFilePath") == f"/app/logs/hpcpack-ddp/$CCP_JOBID.node-{i}.out"
        env = {v.findtext("j:Name", namespaces=NS): v.findtext("j:Value", namespaces=NS)
               for v in task.findall("j:EnvironmentVariables/j:Variable", NS)}
        assert env["TRAINSPEC_NODE_RANK"] == str(i)
        assert env["TRAINSPEC_RDZV_DIR"] == "/app/.trainspec" and env["TRAINSPEC_MASTER_PORT"] == "29400"
        # the shim in the job's staged folder: the spec's here, the job's own once submit names it
        assert env["TRAINSPEC_STAGED_DIR"] == "/app/hpcpack-ddp"
        assert task.get("CommandLine") == ('/opt/conda/envs/torch/bin/python -I -S "$TRAINSPEC_STAGED_DIR"/trainspec_shim.py -- '
                                           "/opt/conda/envs/torch/bin/python -m torch.distributed.run --nnodes 2 "
                                           "--nproc_per_node 4 --no-python /opt/conda/envs/torch/bin/python train.py --steps 100")


def test_reader_accepts_every_attribute_we_write(tmp_path):
    """Attributes the scheduler's XML reader imports (JobPropertyBag/TaskPropertyBag, hpcpack.md §1):
    anything else would be dropped silently on the server."""
    job = compile_xml(SPECS / "hpcpack-ddp.yaml", tmp_path)
    root = lxml.parse(str(job)).getroot()
    job_attrs = {"Version", "Name", "Project", "JobTemplate", "IsExclusive", "FailOnTaskFailure", "Priority",
                 "RuntimeSeconds", "UnitType", "MinNodes", "MaxNodes", "AutoCalculateMin", "AutoCalculateMax",
                 "RequestedNodes", "NodeGroups"}
    task_attrs = {"Version", "Name", "CommandLine", "WorkDirectory", "StdOutFilePath", "StdErrFilePath",
                  "MinNodes", "MaxNodes", "IsExclusive", "IsRerunnable", "RequiredNodes", "Type"}
    assert set(root.attrib) <= job_attrs
    for task in root.iter("{%s}Task" % NS["j"]):
        assert set(task.attrib) <= task_attrs


def test_explicit_nodes_bake_rank_and_master(tmp_path, schema):
    spec = write_spec(tmp_path, "python train.py", extra="    nodes: [GPUNODE-000, GPUNODE-001, GPUNODE-002]\n")
    doc = lxml.parse(str(compile_xml(spec, tmp_path / "out")))
    schema.assertValid(doc)
    root = doc.getroot()
    assert root.get("RequestedNodes") == "GPUNODE-000,GPUNODE-001,GPUNODE-002"
    for i, task in enumerate(root.iter("{%s}Task" % NS["j"])):
        assert task.get("RequiredNodes") == f"GPUNODE-00{i}"
        names = [v.findtext("j:Name", namespaces=NS) for v in task.iter("{%s}Variable" % NS["j"])]
        values = {v.findtext("j:Name", namespaces=NS): v.findtext("j:Value", namespaces=NS)
                  for v in task.iter("{%s}Variable" % NS["j"])}
        assert values["TRAINSPEC_MASTER_ADDR"] == "GPUNODE-000" and "TRAINSPEC_RDZV_DIR" not in names


HOSTILE = "python train.py --note 'a & b < c > d \"q\" $(rm -rf /) ; `x` {{ nodes }}' --path \"$HOME/x y\""


def test_hostile_strings_round_trip_through_xml_and_bash(tmp_path, schema):
    """The command is the user's shell: XML must give bash back exactly that text, and bash must
    then give the script exactly the arguments the user wrote."""
    env = "{WEIRD: \"<&>\\\"' $(x) ; \\nline2\", PLAIN: ok}"
    spec = write_spec(tmp_path, HOSTILE.replace("'", "''").join("''"), env=env)
    job = compile_xml(spec, tmp_path / "out")
    doc = lxml.parse(str(job))
    schema.assertValid(doc)
    task = next(doc.getroot().iter("{%s}Task" % NS["j"]))
    command = task.get("CommandLine")
    rendered = HOSTILE.replace("{{ nodes }}", "3")
    # it expands $HOME: the line runs as `bash -c '<line>'` under the shim, so $... expands after it
    assert shlex.split(command)[-3:-1] == ["bash", "-c"]
    command = shlex.split(command)[-1]
    assert command.endswith(" " + rendered.split(" ", 1)[1])  # the user's text after `python`, verbatim
    values = {v.findtext("j:Name", namespaces=NS): v.findtext("j:Value", namespaces=NS)
              for v in task.iter("{%s}Variable" % NS["j"])}
    assert values["WEIRD"] == "<&>\"' $(x) ; \nline2"
    # bash (as the node agent runs it) hands the script exactly the intended argv
    probe = ("import json, sys; print(json.dumps(sys.argv[1:]))")
    script_args = command.split(" train.py ", 1)[1]
    out = subprocess.run(["bash", "-c", f"{sys.executable} -c {probe!r} {script_args}"], capture_output=True,
                         text=True, env={"HOME": "/home/u", "PATH": os.environ["PATH"]}, timeout=300)
    import json
    assert json.loads(out.stdout) == ["--note", "a & b < c > d \"q\" $(rm -rf /) ; `x` 3", "--path", "/home/u/x y"]


@pytest.mark.parametrize("extra_spec, field, message", [
    ("resources: {nodes: 2, gpus_per_node: 4, spot: true}", "resources.spot",
     "warning: resources.spot: hpcpack cannot express spot capacity"),
    ("environment: {azureml: my-env@latest}", "environment.azureml",
     "error: environment.azureml: hpcpack cannot express an Azure ML registered environment"),
    ("inputs: {mnist: {path: 'azureml:mnist@latest'}}", "inputs.mnist.path",
     "error: inputs.mnist.path: hpcpack cannot express the remote data 'azureml:mnist@latest'"),
    ("environment: {image: pytorch:latest}", "environment.image",
     "warning: environment.image: hpcpack cannot express environment.image"),
    ("distribution: {launcher: mpi}", "distribution.launcher",
     "error: distribution.launcher: hpcpack cannot express launcher mpi"),
])
def test_what_hpcpack_cannot_do_is_reported_by_field(tmp_path, extra_spec, field, message):
    spec = tmp_path / "spec.yaml"
    resources = "" if extra_spec.startswith("resources:") else "resources: {gpus_per_node: 2}\n"
    spec.write_text(f"""version: 1
name: unsupported
code: {REPO}/examples/ddp
command: python train.py
{extra_spec}
{resources}targets:
  hpcpack: {{shared_dir: /app}}
""")
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "hpcpack", str(spec)], capture_output=True, text=True,
                          timeout=300)
    assert message in proc.stderr, proc.stderr
    assert "spec.yaml:5:" in proc.stderr  # the line of the field
    assert proc.returncode == (1 if "error:" in message else 0)


def test_missing_settings_and_bad_shared_dir(tmp_path):
    spec = write_spec(tmp_path, "python train.py").read_text()
    (tmp_path / "a.yaml").write_text(spec.replace("    shared_dir: /shared/jobs\n", "    shared_dir: shared jobs\n"))
    proc = subprocess.run([*trainspec_cmd(), "validate", str(tmp_path / "a.yaml")], capture_output=True, text=True)
    assert "a.yaml:9:17: error: targets.hpcpack.shared_dir: is not an absolute path the node agent can use " \
           "unquoted, got 'shared jobs'" in proc.stderr
    (tmp_path / "b.yaml").write_text(spec.split("targets:")[0])
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "hpcpack", str(tmp_path / "b.yaml")],
                          capture_output=True, text=True)
    assert "error: targets.hpcpack: compiling for hpcpack needs targets.hpcpack.shared_dir" in proc.stderr


def test_deterministic_and_shim_travels_with_the_job(tmp_path):
    first = compile_xml(SPECS / "hpcpack-ddp.yaml", tmp_path / "a").read_bytes()
    second = compile_xml(SPECS / "hpcpack-ddp.yaml", tmp_path / "b").read_bytes()
    assert first == second
    folder = tmp_path / "a" / "hpcpack-ddp" / "hpcpack"
    assert sorted(p.name for p in folder.iterdir()) == ["job.xml", "stage.sh", "trainspec_hpcpack_election.py",
                                                        "trainspec_shim.py"]
    assert os.access(folder / "stage.sh", os.X_OK)


def test_the_characters_a_job_xml_cannot_carry_are_found_with_or_without_the_pattern():
    """xml_unsafe answers ASCII text without its pattern: for every character up to U+FFFF (and in
    ASCII text around it) the answer is the pattern's."""
    import re

    from trainspec.targets.hpcpack.lower import xml_unsafe

    pattern = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufffe\uffff\ud800-\udfff]")
    for code in range(0x10000):
        for text in (chr(code), f"python train.py --x {chr(code)}\tend\r\n"):
            found = pattern.search(text)
            assert xml_unsafe(text) == (found.group() if found else None), hex(code)
    assert xml_unsafe("") is None and xml_unsafe("caf\u00e9 \U0001f600") is None


def test_stage_sh_puts_a_whole_copy_under_the_folder_name_it_is_given(tmp_path):
    """stage.sh FOLDER (submit gives the job's name) copies the code, the shim and its election
    file to <shared>/FOLDER/, made aside and moved into place whole: staging that name again leaves
    nothing of the older copy, and no half-made folder behind. Without FOLDER: the spec's name,
    which the compiled job.xml names. A FOLDER that is not one name is refused."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('one')\n")
    (code / "old.py").write_text("print('old')\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: staged\ncode: code\ncommand: python train.py\n"
                    "resources: {gpus_per_node: 0}\ntargets: {hpcpack: {shared_dir: /app}}\n")
    folder = compile_xml(spec, tmp_path / "out").parent
    shared = tmp_path / "shared"
    env = {**os.environ, "TRAINSPEC_SHARED_DIR": str(shared)}

    def stage(*args):
        return subprocess.run(["bash", str(folder / "stage.sh"), *args], env=env, capture_output=True, text=True,
                              timeout=60)

    assert stage("staged-0123456789").returncode == 0
    job = shared / "staged-0123456789"
    assert sorted(str(p.relative_to(job)) for p in job.rglob("*")) == [
        "code", "code/old.py", "code/train.py", "trainspec_hpcpack_election.py", "trainspec_shim.py"]
    (code / "old.py").unlink()
    (code / "train.py").write_text("print('two')\n")
    assert stage("staged-0123456789").returncode == 0
    assert sorted(p.name for p in (job / "code").iterdir()) == ["train.py"]
    assert (job / "code" / "train.py").read_text() == "print('two')\n"
    assert list((shared / ".trainspec").iterdir()) == []  # the copy was made there and moved
    assert stage().returncode == 0 and (shared / "staged" / "code" / "train.py").is_file()
    for bad in ("../outside", "a/b", ".hidden"):
        proc = stage(bad)
        assert proc.returncode == 2 and "is not a folder name" in proc.stderr, (bad, proc.stderr)
    assert not (tmp_path / "outside").exists() and not (shared / "a").exists()
    root = lxml.parse(str(folder / "job.xml")).getroot()
    task = root.find("j:Tasks/j:Task", NS)
    assert task.get("WorkDirectory") == "/app/staged/code"
