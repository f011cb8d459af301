"""`trainspec run --local` as Azure ML would run it (issue 11, finding 7): the spec's port, a clear
error when it is taken, --input names and paths checked, and no temporary folder left behind.
One CPU process running `python -c`, so these need no torch."""

import socket
import subprocess
from pathlib import Path

from conftest import REPO, loopback_only, path_env, trainspec_cmd

SPEC = """version: 1
name: tiny
code: {code}
command: python -c "import os, sys; print('PORT', os.environ['MASTER_PORT'], 'DATA', sys.argv[1])" {{{{ inputs.data }}}}
resources: {{nodes: 1, gpus_per_node: 0}}
distribution: {{master_port: {port}}}
environment: {{image: python:3.11}}
inputs:
  data: {{path: "azureml://datastores/workspaceblobstore/paths/x/", mode: ro_mount}}
targets: {{azureml: {{compute: cpu-cluster}}}}
"""


def spec(tmp_path: Path, port: int = 6222) -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(code=tmp_path / "code", port=port))
    return path


def run(tmp_path: Path, *args: str, namespace: bool = True) -> subprocess.CompletedProcess:
    """With TMPDIR in the test's folder, so what the run leaves behind is seen."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    command = [*trainspec_cmd(), "run", str(tmp_path / "spec.yaml"), *args]
    return subprocess.run(loopback_only(command) if namespace else command, capture_output=True, text=True,
                          timeout=300, env=path_env(TMPDIR=str(tmp_path / "tmp")), cwd=REPO)


def left_behind(tmp_path: Path):
    return sorted(p.name for p in (tmp_path / "tmp").glob("trainspec-run-*"))


def test_the_job_gets_the_specs_port(tmp_path):
    spec(tmp_path, port=6222)
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "PORT 6222" in proc.stdout, proc.stdout


def test_a_taken_port_is_a_clear_error_before_anything_starts(tmp_path):
    with socket.socket() as listener:  # something already serving on simulated node 0's address
        listener.bind(("127.0.0.2", 0))
        listener.listen()
        port = listener.getsockname()[1]
        spec(tmp_path, port=port)
        proc = run(tmp_path, namespace=False)
    assert proc.returncode == 1
    assert f"trainspec: error: port {port} on 127.0.0.2 (simulated node 0) is taken" in proc.stderr
    assert "--set distribution.master_port=PORT" in proc.stderr
    assert "PORT" not in proc.stdout and "Traceback" not in proc.stderr


def test_input_names_and_paths_are_checked(tmp_path):
    spec(tmp_path)
    proc = run(tmp_path, "--input", "dta=" + str(tmp_path))
    assert proc.returncode == 1
    assert "--input dta: the spec has no such input (its inputs: data)" in proc.stderr
    proc = run(tmp_path, "--input", "data=" + str(tmp_path / "nowhere"))
    assert proc.returncode == 2
    assert f"--input data={tmp_path / 'nowhere'}: no such file or directory" in proc.stderr
    proc = run(tmp_path, "--input", "data=" + str(tmp_path / "code"))
    assert proc.returncode == 0, proc.stderr
    assert f"DATA {tmp_path / 'code'}" in proc.stdout


def test_the_temporary_folder_goes_on_every_exit_unless_kept(tmp_path):
    spec(tmp_path)
    assert run(tmp_path).returncode == 0
    assert left_behind(tmp_path) == []
    proc = run(tmp_path, "--set", "resources.nodes=0")  # stopped by a validation error
    assert proc.returncode == 1 and "nothing was run" in proc.stderr
    assert left_behind(tmp_path) == []
    (tmp_path / "spec.yaml").write_text((tmp_path / "spec.yaml").read_text().replace("print(", "exit(3) or print("))
    assert run(tmp_path).returncode == 3  # the job failed
    assert left_behind(tmp_path) == []
    proc = run(tmp_path, "--keep")
    kept = left_behind(tmp_path)
    assert len(kept) == 1 and f"kept the work directory {tmp_path / 'tmp' / kept[0]}" in proc.stderr
    assert (tmp_path / "tmp" / kept[0] / "tiny" / "azureml" / "job.yml").exists()
    work = tmp_path / "work"
    assert run(tmp_path, "--workdir", str(work)).returncode == 3 and (work / "tiny" / "azureml" / "job.yml").exists()


def test_the_clis_own_start_up_setting_stays_out_of_the_job(tmp_path):
    """trainspec sets PYDANTIC_DISABLE_PLUGINS for its own start-up; a training process (which may use
    pydantic plugins) must not inherit it. One the user set is theirs, and passes through."""
    spec(tmp_path)
    text = (tmp_path / "spec.yaml").read_text().replace(
        "print('PORT', os.environ['MASTER_PORT'], 'DATA', sys.argv[1])",
        "print('PLUGINS', os.environ.get('PYDANTIC_DISABLE_PLUGINS'))")
    (tmp_path / "spec.yaml").write_text(text)
    proc = run(tmp_path)
    assert proc.returncode == 0 and "PLUGINS None" in proc.stdout, proc.stdout + proc.stderr
    command = [*trainspec_cmd(), "run", str(tmp_path / "spec.yaml")]
    mine = subprocess.run(loopback_only(command), capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=path_env(PYDANTIC_DISABLE_PLUGINS="logfire", TMPDIR=str(tmp_path / "tmp")))
    assert "PLUGINS logfire" in mine.stdout, mine.stdout + mine.stderr
