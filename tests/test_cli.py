"""The command line as a user meets it: exit codes, messages, what is (not) written."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SPECS, trainspec_cmd, ts




def write_spec(path: Path, body: str) -> Path:
    path.write_text(body.replace("CODE", str(REPO / "examples" / "mnist")))
    return path


GOOD = """version: 1
name: good
code: CODE
command: python train.py
resources: {sku: Standard_ND96isr_H100_v5}
environment: {image: pytorch:latest}
targets: {azureml: {compute: gpu-cluster}}
"""


def test_version_and_help():
    from trainspec import __version__

    assert ts("--version").stdout.strip().endswith(__version__)
    help_text = ts("--help").stdout
    assert "Examples:" in help_text and "trainspec compile specs/ -o build/" in help_text


def test_compile_writes_every_target_dir_and_says_how_to_submit(tmp_path):
    proc = ts("compile", "specs", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for spec in SPECS.glob("*.yaml"):
        written = {p.parent.name for p in (tmp_path / spec.stem).glob("*/*") if p.is_file()}
        assert written, spec
    assert f"az ml job create --file {tmp_path}/mnist-lightning/azureml/job.yml" in proc.stdout
    assert f"sbatch {tmp_path}/slurm-ddp/slurm/job.sbatch" in proc.stdout
    # the examples' warnings, each what a platform cannot do as the spec says: Ray's standalone VMs
    # have no InfiniBand (the Ray seed, the five-target fine-tunes), HPC Pack and Slurm set no
    # shared-memory size and HPC Pack runs no image (the five-target fine-tunes), and Ray hands a
    # storage URL, not a mounted path, to a command that reads or writes a path there
    warned = sorted((line.split(":")[0], line.split(": warning: ")[1].split(":")[0])
                    for line in proc.stderr.splitlines() if ": warning: " in line)
    assert warned == [("specs/ray-lightning.yaml", "resources.sku"),
                      *(("specs/sft-deepspeed-h100.yaml", field) for field in (
                          "environment.image", "outputs.model", "resources.shm_size", "resources.shm_size",
                          "resources.sku")),
                      *(("specs/sft-h100.yaml", field) for field in (
                          "environment.image", "inputs.corpus", "outputs.ckpt", "resources.shm_size",
                          "resources.shm_size", "resources.sku"))], proc.stderr
    assert f"{len(list(SPECS.glob('*.yaml')))} specs: 0 errors, 12 warnings" in proc.stderr


def test_one_bad_spec_writes_nothing_and_leaves_previous_outputs(tmp_path):
    out = tmp_path / "build"
    good = write_spec(tmp_path / "good.yaml", GOOD)
    assert ts("compile", str(good), "-o", str(out)).returncode == 0
    before = (out / "good" / "azureml" / "job.yml").read_bytes()
    write_spec(good, GOOD.replace("python train.py", "python train.py --x {{ nope }}"))
    other = write_spec(tmp_path / "other.yaml", GOOD.replace("name: good", "name: other"))
    proc = ts("compile", str(good), str(other), "-o", str(out))
    assert proc.returncode == 1
    assert "good.yaml:4:10: error: command: undefined template name: nope" in proc.stderr
    assert "nothing written" in proc.stderr and "Traceback" not in proc.stderr
    assert (out / "good" / "azureml" / "job.yml").read_bytes() == before
    assert not (out / "other").exists()


def test_a_failed_write_leaves_previous_outputs_intact(tmp_path, monkeypatch):
    """Disk full / interrupted during the write: the old files stay, no staging debris is left."""
    from trainspec.compiler import write as writer
    from trainspec.compiler.base import Artifact, OutFile

    final = tmp_path / "out" / "job" / "azureml"
    writer.write(final, Artifact("azureml", "job", (OutFile("job.yml", b"old\n"),), "submit"))

    real_fsync = os.fsync
    monkeypatch.setattr(writer.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError):
        writer.write(final, Artifact("azureml", "job", (OutFile("job.yml", b"new\n"),), "submit"))
    monkeypatch.setattr(writer.os, "fsync", real_fsync)
    assert (final / "job.yml").read_bytes() == b"old\n"
    assert sorted(p.name for p in final.parent.iterdir()) == ["azureml"]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is Linux/BSD only")
def test_every_write_back_starts_before_the_first_fsync_and_advice_that_fails_changes_nothing(tmp_path, monkeypatch):
    """The staged files' write-back is started for all of them before the first fsync (one commit
    for all instead of one per file: docs/speed.md), every file is still fsynced, and a refused
    advice is no failure."""
    from trainspec.compiler import write as writer
    from trainspec.compiler.base import Artifact, OutFile

    calls = []
    real_fsync = os.fsync

    def advise(fd, offset, length, advice):
        calls.append(("advise", os.readlink(f"/proc/self/fd/{fd}"), advice))
        raise OSError(22, "Invalid argument")

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), None))
        real_fsync(fd)

    monkeypatch.setattr(writer.os, "posix_fadvise", advise)
    monkeypatch.setattr(writer.os, "fsync", fsync)
    out = tmp_path / "out"
    writer.write_all(out, [Artifact(target, "job", (OutFile("a.txt", b"a\n"), OutFile("sub/b.txt", b"b\n")), "submit")
                           for target in ("azureml", "ray")])
    monkeypatch.setattr(writer.os, "fsync", real_fsync)
    kinds = [kind for kind, _, _ in calls]
    assert kinds == ["advise"] * 4 + ["fsync"] * 4
    assert {advice for kind, _, advice in calls if kind == "advise"} == {os.POSIX_FADV_DONTNEED}
    advised = [path for kind, path, _ in calls if kind == "advise"]
    assert [path for kind, path, _ in calls if kind == "fsync"] == advised and len(set(advised)) == 4
    for target in ("azureml", "ray"):
        assert (out / "job" / target / "sub" / "b.txt").read_bytes() == b"b\n"


def test_a_failed_fsync_of_one_target_swaps_in_no_target(tmp_path, monkeypatch):
    """Every file of every target is made durable before any folder is swapped in: a failure on
    one file leaves all the previous folders as they were, and no staging folder behind."""
    from trainspec.compiler import write as writer
    from trainspec.compiler.base import Artifact, OutFile

    out = tmp_path / "out"
    old = [Artifact(target, "job", (OutFile("a.txt", b"old\n"), OutFile("sub/b.txt", b"old\n")), "submit")
           for target in ("azureml", "ray")]
    writer.write_all(out, old)
    real_fsync = os.fsync
    synced = []

    def fsync(fd):
        synced.append(fd)
        if len(synced) == 3:  # the ray folder's first file: azureml's two are durable already
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(writer.os, "fsync", fsync)
    new = [Artifact(a.target, "job", (OutFile("a.txt", b"new\n"), OutFile("sub/b.txt", b"new\n")), "submit")
           for a in old]
    with pytest.raises(OSError, match="Input/output error"):
        writer.write_all(out, new)
    monkeypatch.setattr(writer.os, "fsync", real_fsync)
    for target in ("azureml", "ray"):
        assert (out / "job" / target / "a.txt").read_bytes() == b"old\n"
        assert (out / "job" / target / "sub" / "b.txt").read_bytes() == b"old\n"
    assert sorted(p.name for p in (out / "job").iterdir()) == ["azureml", "ray"]


def test_a_recompile_replaces_the_folder_whole_and_deletes_a_link_in_it_without_following_it(tmp_path):
    """The previous folder goes, whatever it holds: a file someone added, a subfolder, a link to a
    folder elsewhere (deleted, while what it leads to stays)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    good = write_spec(tmp_path / "good.yaml", GOOD)
    out = tmp_path / "build"
    assert ts("compile", str(good), "-o", str(out)).returncode == 0
    folder = out / "good" / "azureml"
    written = sorted(p.name for p in folder.iterdir())
    (folder / "added").mkdir()
    (folder / "added" / "note.txt").write_text("x\n")
    (folder / "link").symlink_to(elsewhere, target_is_directory=True)
    proc = ts("compile", str(good), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == written
    assert (elsewhere / "keep.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (out / "good").iterdir()) == ["azureml"]  # no .new or .old folder left


def test_a_folder_that_holds_what_compile_would_write_is_left_as_it_is(tmp_path):
    """Compiling again over up-to-date outputs writes nothing: the same files (inode, time), no
    staging folder, and the output says "unchanged". A folder that differs in any way (a byte, a
    file's mode, a file replaced by a link to the same bytes, a file added) is written whole."""
    good = write_spec(tmp_path / "good.yaml", GOOD.replace(
        "targets: {azureml: {compute: gpu-cluster}}",
        "targets: {azureml: {compute: gpu-cluster}, hpcpack: {node_group: LinuxNodes, shared_dir: /app}}"))
    out = tmp_path / "build"
    first = ts("compile", str(good), "-o", str(out))
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("wrote ") == 2 and "unchanged" not in first.stdout
    folder = out / "good" / "hpcpack"
    job, stage = folder / "job.xml", folder / "stage.sh"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}

    again = ts("compile", str(good), "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert f"unchanged {folder}/ (job.xml, stage.sh" in again.stdout and "wrote " not in again.stdout
    assert again.stdout.count("  submit: ") == 2  # how to submit is said as after a write
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()} == before
    assert sorted(p.name for p in (out / "good").iterdir()) == ["azureml", "hpcpack"]  # no staging left

    def compiled_again() -> str:
        proc = ts("compile", str(good), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        return next(line.split()[0] for line in proc.stdout.splitlines() if f"{folder}/" in line)

    xml = job.read_bytes()
    job.write_bytes(xml.replace(b"LinuxNodes", b"LinuxNodez"))
    assert compiled_again() == "wrote" and job.read_bytes() == xml
    mode = stage.stat().st_mode & 0o777
    stage.chmod(mode ^ 0o111)
    assert compiled_again() == "wrote" and stage.stat().st_mode & 0o777 == mode
    elsewhere = tmp_path / "job.xml"
    elsewhere.write_bytes(xml)
    job.unlink()
    job.symlink_to(elsewhere)
    assert compiled_again() == "wrote" and not job.is_symlink() and job.read_bytes() == xml
    (folder / "notes.txt").write_text("mine\n")
    assert compiled_again() == "wrote" and not (folder / "notes.txt").exists()
    folder.chmod(0o700)
    assert compiled_again() == "wrote" and folder.stat().st_mode & 0o777 == 0o755
    assert compiled_again() == "unchanged"


def test_an_unchanged_folder_is_read_never_written_or_fsynced(tmp_path, monkeypatch):
    """Files that hold what compile would write (here as another tool left them) are read and left
    as they are: nothing opened for writing, nothing fsynced (an fsync of a clean file still
    flushes the disk's cache), no folder swapped."""
    from trainspec.compiler import write as writer
    from trainspec.compiler.base import Artifact, OutFile

    artifact = Artifact("azureml", "job", (OutFile("a.txt", b"a\n"), OutFile("sub/b.sh", b"b\n", True)), "submit")
    folder = tmp_path / "out" / "job" / "azureml"
    (folder / "sub").mkdir(parents=True)
    folder.chmod(0o755)
    (folder / "a.txt").write_bytes(b"a\n")
    (folder / "sub" / "b.sh").write_bytes(b"b\n")
    (folder / "a.txt").chmod(0o644)
    (folder / "sub" / "b.sh").chmod(0o755)
    synced, opened = [], []
    real_fsync, real_open = os.fsync, os.open
    monkeypatch.setattr(writer.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                        real_fsync(fd))[1])
    monkeypatch.setattr(writer.os, "open", lambda path, flags, *a: (opened.append(flags), real_open(path, flags, *a))[1])
    assert writer.write_all(tmp_path / "out", [artifact]) == [(folder, False)]
    monkeypatch.undo()
    assert synced == []
    assert opened and all(flags & (os.O_WRONLY | os.O_RDWR) == 0 for flags in opened)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["azureml"]


def test_compile_starts_without_dataclasses_shutil_or_tempfile(tmp_path):
    """Start-up (goal (b) of issues 30 and 42, docs/speed.md): a cold compile of three targets, over
    outputs already there (the folder swap runs), imports neither dataclasses (with inspect, ast,
    dis) nor shutil (with bz2, lzma) nor tempfile (with random), nor hashlib (OpenSSL), pydantic,
    pydantic-core's package (typing_extensions), jinja2, subprocess, threading, pickle or signal
    (check's worker alone needs those two), nor the settings
    of the two targets the spec does not configure, nor the runtime's platform detectors (the
    compiler needs the shim's contract and sources, never its detectors), and compiles none of the
    patterns kept for unusual specs (core/patterns.py); a cold `check` of what it wrote imports
    none of them either but hashlib (its cache hashes every output). The time itself is measured
    in benchmarks/."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD.replace("CODE", str(REPO / "examples" / "mnist")).replace(
        "targets: {azureml: {compute: gpu-cluster}}",
        "targets: {azureml: {compute: gpu-cluster}, hpcpack: {node_group: LinuxNodes, shared_dir: /app}, "
        "ray: {location: eastus, resource_group: rg}}"))
    heavy = ("dataclasses", "inspect", "shutil", "tempfile", "hashlib", "pydantic", "pydantic_core.core_schema",
             "typing_extensions", "jinja2", "subprocess", "threading", "pickle", "signal",
             "trainspec.targets.slurm.settings",
             "trainspec.targets.kubernetes.settings", *(f"trainspec.runtime.{platform}_detector"
                                                        for platform in ("azureml", "hpcpack", "ray", "slurm")))
    code = ("import sys; from trainspec.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            f"print('LOADED:' + ','.join(m for m in {heavy!r} if m in sys.modules))\n"
            "from trainspec.core.patterns import Lazy\n"
            "print('COMPILED:' + ','.join(f'{name}.{key}' for name, module in sorted(sys.modules.items()) "
            "if name.startswith('trainspec') for key, value in sorted(vars(module).items()) "
            "if isinstance(value, Lazy) and value._compiled is not None))")
    for run in range(2):  # the second run, of a changed spec, replaces the first one's folders
        if run:
            spec.write_text(spec.read_text().replace("python train.py", "python train.py --again"))
        proc = subprocess.run([sys.executable, "-c", code, "compile", str(spec), "-o", str(tmp_path / "out")],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "LOADED:\n" in proc.stdout and "COMPILED:\n" in proc.stdout, proc.stdout
        assert proc.stdout.count("wrote ") == 3, proc.stdout
    assert sorted(p.name for p in (tmp_path / "out" / "good").iterdir()) == ["azureml", "hpcpack", "ray"]
    proc = subprocess.run([sys.executable, "-c", code, "check", str(spec), "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRAINSPEC_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr
    assert "LOADED:hashlib\n" in proc.stdout and "COMPILED:\n" in proc.stdout, proc.stdout


def test_compile_reports_an_unwritable_output_without_traceback(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("a file where the output directory should be")
    good = write_spec(tmp_path / "good.yaml", GOOD)
    proc = ts("compile", str(good), "-o", str(blocker / "build"))
    assert proc.returncode == 1
    assert "trainspec: error: cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_validate_shows_every_problem_and_exit_codes(tmp_path):
    bad = write_spec(tmp_path / "bad.yaml", GOOD.replace("sku: Standard_ND96isr_H100_v5",
                                                         "sku: Standard_ND96isr_H100_v5, nodes: 0, shm_size: 1x"))
    proc = ts("validate", str(bad))
    assert proc.returncode == 1
    assert proc.stderr.count(": error: ") == 2
    good = write_spec(tmp_path / "good.yaml", GOOD)
    assert ts("validate", str(good)).returncode == 0


def test_two_specs_with_one_name_are_an_error(tmp_path):
    a = write_spec(tmp_path / "a.yaml", GOOD)
    b = write_spec(tmp_path / "b.yaml", GOOD)
    proc = ts("compile", str(a), str(b), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "is also the name of" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, message", [
    (b"version: 1\nname: caf\xe9\n", "2:10: error: file is not valid UTF-8 (byte 0xe9)"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "1:8: error: file contains NUL bytes"),
    (b"version: 1\n" + b"# padding\n" * 120_000, "1:1: error: file is larger than 1024 KiB"),
    (b"version: 1\ncommand: [unclosed\n", "error: invalid YAML"),
    (b"[" * 5000 + b"]" * 5000, "error: document is nested too deeply"),
    (b"", "1:1: error: version: is required"),
], ids=["not-utf8", "binary", "over-1-MiB", "invalid-yaml", "nested-5000", "empty"])  # short ids: pytest puts the
# test's id in the environment of every command it starts (PYTEST_CURRENT_TEST), and one of 1.2 MB is
# more than exec allows (E2BIG)
def test_hostile_files_get_one_clear_error(tmp_path, content, message):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(content)
    proc = ts("validate", str(spec))
    assert proc.returncode == 1
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_spec_file_and_empty_dir(tmp_path):
    proc = ts("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1 and "nope.yaml:1:1: error: no such file" in proc.stderr
    proc = ts("compile", str(tmp_path))
    assert proc.returncode == 2 and "no spec files" in proc.stderr


def test_schema_is_json_schema_of_the_spec():
    proc = ts("schema")
    schema = json.loads(proc.stdout)
    assert schema["title"] == "Spec"
    # a spec that extends nothing needs these; one that `extends` a base gets them from the chain
    assert schema["if"] == {"required": ["extends"]}
    assert {"version", "name", "code", "command"} <= set(schema["else"]["required"])
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("command", [["compile", "specs", "-o", "OUT"], ["plan", "specs", "--format", "json"]])
def test_compile_imports_no_heavy_library(tmp_path, command):
    """compile (and plan, which names the job submit would make) must not pay for torch, ray,
    azure-ai-ml, kubernetes or lightning (timing lives in benchmarks/)."""
    argv = [str(tmp_path) if word == "OUT" else word for word in command]
    code = ("import sys; from trainspec.cli import main\n"
            "try:\n    main(%r)\nexcept SystemExit as e:\n    assert e.code in (0, None)\n"
            "print('HEAVY:' + ','.join(m for m in ('torch', 'ray', 'azure.ai.ml', 'azure.identity', 'kubernetes', "
            "'lightning', 'jinja2.sandbox') if m in sys.modules))" % argv)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    line = [l for l in proc.stdout.splitlines() if l.startswith("HEAVY:")][0]
    heavy = [m for m in line[6:].split(",") if m and m != "jinja2.sandbox"]
    assert heavy == [], heavy


# --- issue 10: what a user trips on ----------------------------------------------------------

def test_bare_trainspec_prints_help():
    proc = ts()
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("usage: trainspec [-h] [--version] COMMAND ...")
    for command in ("validate", "compile", "check", "plan", "diff", "schema", "run"):
        assert f"    {command} " in proc.stdout


@pytest.mark.parametrize("args", [["plan", "specs/"], ["schema"], ["diff", "specs/mnist-lightning.yaml",
                                                                     "--set", "resources.nodes=4"]])
def test_a_closed_pipe_ends_quietly_with_status_0(args):
    """`trainspec plan specs/ | head -1`: the reader is gone before trainspec writes."""
    read, write = os.pipe()
    os.close(read)  # nobody will read: every write fails with EPIPE
    proc = subprocess.run([*trainspec_cmd(), *args], cwd=REPO, stdout=write, stderr=subprocess.PIPE, text=True,
                          timeout=120)
    os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


def test_strict_says_warnings_count_as_errors():
    proc = ts("validate", "--strict", "tests/bad_specs/warn-idle-gpus.yaml")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == "1 spec: 0 errors, 1 warning (--strict: warnings count as errors)"
    assert ts("validate", "tests/bad_specs/warn-idle-gpus.yaml").returncode == 0


def test_set_on_a_path_that_does_not_exist_suggests_the_full_path():
    proc = ts("validate", "specs/mnist-lightning.yaml", "--set", "nodes=2")
    assert proc.returncode == 1
    assert "--set nodes=2: error: nodes: unknown key 'nodes' (hint: did you mean 'resources.nodes'?)" in proc.stderr


def test_run_usage_is_truthful():
    usage = ts("run", "--help").stdout
    assert "usage: trainspec run [-h] [--local]" in usage  # optional: running here is the only mode
    proc = ts("run")
    assert proc.returncode == 2 and "the following arguments are required: SPEC" in proc.stderr


def test_run_refuses_a_ray_job_in_one_line_before_reading_the_spec():
    proc = ts("run", "specs/ray-lightning.yaml", "-t", "ray")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["trainspec run: error: run --local plays the jobs of the other targets (-t azureml|hpcpack|kubernetes|slurm); "
                      "a Ray job runs on a Ray cluster: start it with `bash OUT/<name>/ray/launch.sh` (README, Ray), "
                      "or try the spec here with another -t"], proc.stderr


def test_validate_for_machines(tmp_path):
    bad = write_spec(tmp_path / "bad.yaml", GOOD.replace("command: python train.py\n", "command: python train.py\n"
                                                          "env: {A: 'x'}\n").replace("sku: Standard", "nodes: 0, sku: Standard"))
    data = json.loads(ts("validate", "--format", "json", str(bad)).stdout)
    assert {"file": str(bad), "line": 6, "col": 20, "severity": "error", "field": "resources.nodes",
            "message": "expected greater than or equal to 1, got 0 (an integer)", "hint": "an integer >= 1, e.g. nodes: 2"} in data
    github = ts("validate", "--format", "github", str(bad))
    assert github.returncode == 1
    # property values escape : and , (GitHub's workflow-command rules)
    assert f"::error file={str(bad).replace(':', '%3A').replace(',', '%2C')},line=6,col=20,title=resources.nodes::" \
           "expected greater than or equal to 1, got 0 (an integer) (hint: an integer >= 1, e.g. nodes: 2)" in github.stdout


def test_a_folder_of_specs_may_hold_its_team_catalog_which_is_no_spec(tmp_path):
    """trainspec-skus.yaml beside the specs (docs/skus.md) is read as the catalog, never compiled."""
    (tmp_path / "specs").mkdir()
    shutil.copy(SPECS / "slurm-ddp.yaml", tmp_path / "specs")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "specs" / "trainspec-skus.yaml").write_text("partitions: {hpc: Standard_ND96isr_H100_v5}\n")
    proc = ts("compile", "specs", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0 and "1 spec: 0 errors, 0 warnings" in proc.stderr, proc.stderr
    plan = ts("plan", "specs", cwd=tmp_path, check=True).stdout
    assert "selected by partition hpc: Standard_ND96isr_H100_v5, in" in plan, plan


@pytest.mark.parametrize("argv", [
    ["compile", "a.yaml", "b/", "-t", "ray", "-t", "hpcpack", "-o", "out", "--strict", "--prune", "--set", "x=1"],
    ["run", "spec.yaml", "--procs-per-node", "2", "--nodes", "3", "--launcher", "mpi", "--input", "d=/tmp"],
    ["submit", "specs/", "--follow", "--all-ranks", "--max-wait", "2h", "--workspace", "ws"],
    ["skus", "--gpu", "H100", "--no-infiniband"],
])
def test_parser_built_for_one_command_reads_it_as_the_whole_parser(argv):
    """Start-up: only the command being run gets its flags (argparse builds a help formatter for each
    flag it adds); that command's arguments, defaults and help are the same as with every command's."""
    from trainspec.cli.parser import parser

    def read(top):
        args = vars(top.parse_args(argv))
        return {k: v for k, v in args.items() if k != "parser"}, args["parser"].format_help()

    assert read(parser(argv)) == read(parser())


def test_parser_for_one_command_leaves_the_others_without_flags():
    """What makes it faster: the other commands' parsers get no flag, not even -h (and still list in --help)."""
    import argparse

    from trainspec.cli.parser import COMMANDS, parser

    top = parser(["compile", "spec.yaml"])
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert sorted(commands) == sorted(COMMANDS)
    assert [name for name, sub in commands.items() if sub._actions] == ["compile"]
