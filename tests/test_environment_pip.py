"""environment.pip on the targets that run the nodes' (or the image's) own software: Slurm, HPC
Pack and Kubernetes. Each compiled job carries the requirements as one escaped value
(TRAINSPEC_PIP) and the shim installs them once per node, before it execs the command; a pip
item that is an option, a path or a bare URL is an error at its line on every target; a conda
file, which nothing there would create, is an error. (Azure ML's Docker build context and Ray's
setup commands: tests/test_azureml.py, tests/test_ray_config.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import lxml.etree as lxml
import pytest
import yaml

import kube_schema
from conftest import REPO, loopback_only, path_env, trainspec_cmd, ts
from test_hpcpack import NS, XSD

from trainspec.runtime import shim_pip

# Requirements a user may write that a shell would read otherwise: each must reach pip as the one
# argument it is (markers with quotes and ;, a direct reference whose URL has $( ) and &).
HOSTILE = ["transformers[torch]>=4.44,<5", "tinypkg==0.1; python_version >= '3.8'",
           "evil @ https://example.com/e.whl?x=$(touch /tmp/pwned)&y=`id`"]

TARGETS = {
    "slurm": "slurm: {}",
    "hpcpack": "hpcpack: {shared_dir: /shared/jobs, python: /opt/conda/bin/python}",
    "kubernetes": "kubernetes: {}",
}


def write_spec(tmp_path: Path, target: str, environment: str, name: str = "job") -> Path:
    image = "image: 'pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime', " if target == "kubernetes" else ""
    path = tmp_path / "spec.yaml"
    path.write_text(f"""version: 1
name: {name}
code: {REPO}/examples/ddp
command: python train.py --steps 3
resources: {{nodes: 2, gpus_per_node: 2}}
environment: {{{image}{environment}}}
targets:
  {TARGETS[target]}
""", encoding="utf-8")
    return path


def pip_of(target: str, out: Path) -> str:
    """TRAINSPEC_PIP as each platform will set it, read back the way the platform reads the file,
    after the file passed that platform's own checks."""
    job = out / "job" / target
    if target == "slurm":
        script = (job / "job.sbatch").read_text()
        check = subprocess.run([str(Path(sys.executable).with_name("shellcheck")), "-s", "bash", "-S", "warning",
                                str(job / "job.sbatch")], capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout
        line = next(line for line in script.splitlines() if line.startswith("export TRAINSPEC_PIP="))
        # before srun: the shim of every task gets it
        assert script.index(line) < script.index("\nsrun ")
        return subprocess.run(["bash", "-c", f"{line}; printf %s \"$TRAINSPEC_PIP\""], capture_output=True,
                              text=True, timeout=60, check=True).stdout
    if target == "hpcpack":
        doc = lxml.parse(str(job / "job.xml"))
        lxml.XMLSchema(lxml.parse(str(XSD))).assertValid(doc)
        values = {(v.findtext("j:Name", namespaces=NS), v.findtext("j:Value", namespaces=NS))
                  for v in doc.getroot().iter("{%s}Variable" % NS["j"])}
        found = {value for name, value in values if name == "TRAINSPEC_PIP"}
        assert len(found) == 1  # the same in every task: each node's first task installs
        return found.pop()
    text = (job / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []
    found = set()
    for document in yaml.safe_load_all(text):
        for process in _with_env(document):  # a PyTorchJob's containers, a TrainJob's trainer
            values = {e["value"] for e in process["env"] if e["name"] == "TRAINSPEC_PIP"}
            # the shim (which installs) runs before the command in every pod
            assert not values or "trainspec_shim.py" in process["command"][-1]
            found |= values
    assert len(found) == 1
    return found.pop()


def _with_env(node):
    """Every mapping of a document with an `env` list: what runs a process."""
    if isinstance(node, dict):
        if isinstance(node.get("env"), list):
            yield node
        for value in node.values():
            yield from _with_env(value)
    elif isinstance(node, list):
        for value in node:
            yield from _with_env(value)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_target_carries_the_pip_packages_to_the_shim_exactly_and_warns_of_nothing(tmp_path, target):
    if target == "hpcpack" and not XSD.exists():
        pytest.skip(f"the HPC Pack XSD is not here ({XSD}): it lives in the shared reference, never in this repo")
    spec = write_spec(tmp_path, target, "pip: " + json.dumps(HOSTILE))
    proc = ts("compile", str(spec), "-t", target, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "environment.pip" not in proc.stdout + proc.stderr  # no "cannot express" warning any more
    assert json.loads(pip_of(target, tmp_path / "out")) == HOSTILE
    # and the shim hands them to pip as they are, after `--`: never an option, never a shell word
    calls = []
    env = {shim_pip.ENV_PIP: pip_of(target, tmp_path / "out")}
    shim_pip.install_pip(env, run=lambda argv: calls.append(argv) or 0, tmpdir=str(tmp_path), job="7")
    assert calls[0][calls[0].index("--") + 1:] == HOSTILE
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_pip_item_that_is_an_option_a_path_or_a_bare_url_is_an_error_at_its_line(tmp_path, target):
    items = ["torch==2.4.1", "--index-url=https://mirror.example/simple", "-e .",
             "git+https://github.com/x/y", "./vendor/pkg", "pkg.whl"]
    spec = write_spec(tmp_path, target, "pip: [\n    " + ",\n    ".join(json.dumps(i) for i in items) + "]")
    proc = ts("compile", str(spec), "-t", target, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    lines = spec.read_text().splitlines()
    for index, item in enumerate(items[1:], start=1):
        line = next(n for n, text_line in enumerate(lines, start=1) if json.dumps(item) in text_line)
        assert f"spec.yaml:{line}:5: error: environment.pip[{index}]" in text, text
    assert "torch==2.4.1" not in text.replace(json.dumps(items), "")  # the good one is not reported
    assert "PIP_INDEX_URL" in text  # where an index goes instead
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_conda_file_is_an_error_where_nothing_would_create_the_environment(tmp_path, target):
    spec = write_spec(tmp_path, target, f"conda_file: {REPO}/examples/ddp/environment.yml")
    proc = ts("compile", str(spec), "-t", target, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: environment.conda_file:" in proc.stdout + proc.stderr
    assert "environment.pip" in proc.stdout + proc.stderr  # the hint: what does work


def test_the_shim_installs_once_per_node_and_puts_the_packages_first_on_pythonpath(tmp_path):
    calls = []

    def pip(argv):
        calls.append(argv)
        Path(argv[argv.index("--target") + 1]).mkdir(parents=True)
        return 0

    node = str(tmp_path)
    first = {shim_pip.ENV_PIP: '["tinypkg==0.1"]', "PYTHONPATH": "/code"}
    second = dict(first)
    site = shim_pip.install_pip(first, run=pip, tmpdir=node, job="7")
    assert shim_pip.install_pip(second, run=pip, tmpdir=node, job="7") == site  # the node's second process: done
    assert len(calls) == 1 and calls[0][:3] == [sys.executable, "-m", "pip"]
    assert first["PYTHONPATH"] == second["PYTHONPATH"] == site + os.pathsep + "/code"
    # another job on the same node gets its own folder
    other = {shim_pip.ENV_PIP: '["tinypkg==0.1"]'}
    assert shim_pip.install_pip(other, run=pip, tmpdir=node, job="8") != site and len(calls) == 2
    # no pip, nothing to do
    assert shim_pip.install_pip({}, run=pip, tmpdir=node) is None and len(calls) == 2


def test_the_shim_refuses_a_folder_another_user_could_have_planted_packages_in(tmp_path):
    env = {shim_pip.ENV_PIP: '["tinypkg"]'}
    folder = Path(shim_pip.pip_folder("", ["tinypkg"], str(tmp_path)))
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # writable by anyone: someone else's packages could be in it
    with pytest.raises(shim_pip.ShimError, match="only it can write"):
        shim_pip.install_pip(env, run=lambda argv: 0, tmpdir=str(tmp_path))
    folder.rmdir()
    folder.symlink_to(tmp_path)  # a link to somewhere else
    with pytest.raises(shim_pip.ShimError, match="only it can write"):
        shim_pip.install_pip(env, run=lambda argv: 0, tmpdir=str(tmp_path))
    for bad in ('["--index-url=x"]', '{"a": 1}', "not json"):
        with pytest.raises(shim_pip.ShimError, match="TRAINSPEC_PIP"):
            shim_pip.install_pip({shim_pip.ENV_PIP: bad}, run=lambda argv: 0, tmpdir=str(tmp_path))


def _wheel(folder: Path) -> None:
    """tinypkg 0.1 as a wheel, written by hand (the wheel format is a zip): no build, no network."""
    folder.mkdir()
    dist = "tinypkg-0.1.dist-info"
    files = {"tinypkg/__init__.py": "MARK = 'tinypkg imported'\n",
             f"{dist}/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / "tinypkg-0.1-py3-none-any.whl", "w") as whl:
        for name, text in {**files, f"{dist}/RECORD": record}.items():
            whl.writestr(name, text)


def test_a_slurm_job_installs_the_package_once_per_node_before_the_command_that_imports_it(tmp_path):
    """run --local -t slurm plays the compiled job.sbatch: its shim installs tinypkg (from a local
    folder: PIP_NO_INDEX and PIP_FIND_LINKS in the spec's env, as a mirror would be named) once
    for the node's two tasks, and the command, which imports it, runs in both after that."""
    _wheel(tmp_path / "wheels")
    code = tmp_path / "code"
    code.mkdir()
    (code / "check.py").write_text("import os, tinypkg\n"
                                   "line = ' '.join(['rank', os.environ['RANK'], tinypkg.MARK, tinypkg.__file__]) + '\\n'\n"
                                   "os.write(1, line.encode())  # one write: the two ranks' lines never interleave\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: pipjob
code: code
command: python check.py
resources: {{nodes: 1, gpus_per_node: 2}}
environment: {{pip: ["tinypkg==0.1"]}}
env: {{PIP_NO_INDEX: "1", PIP_FIND_LINKS: {json.dumps(str(tmp_path / 'wheels'))}, TMPDIR: {json.dumps(str(tmp_path))}}}
targets:
  slurm: {{container: false}}
""", encoding="utf-8")
    command = loopback_only([*trainspec_cmd(), "run", str(spec), "-t", "slurm", "--local", "--workdir",
                             str(tmp_path / "work")])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=path_env(), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("trainspec: installing environment.pip on this node") == 1, out
    site = next(tmp_path.glob(shim_pip.PIP_DIR_PREFIX + "*/site-packages"))
    for rank in ("0", "1"):
        assert f"rank {rank} tinypkg imported {site / 'tinypkg' / '__init__.py'}" in out, out
    assert out.index("installing environment.pip") < out.index("tinypkg imported")
