"""A folder a job ships (the code, a build context, local data) pointed at something no job
ships: a whole disk, a symbolic link loop. Found by the fuzzer (TRAINSPEC_FUZZ_SEED=8123,
COUNT=1200): outside a repository, `inputs: {data: {path: "../../../../../../.."}}` walked the
whole file system (no answer within 10 s), and an input naming a link loop was an internal error
(Path.resolve's RuntimeError). Both are now located errors, in well under a second."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import REPO, ts

LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")

SPEC = """version: 1
name: shipped
command: python train.py
framework: pytorch
resources: {nodes: 1, gpus_per_node: 0}
targets: {azureml: {compute: cpu-cluster}}
"""
# each field that names a folder the job ships, as a spec line (ADD) and the field it is reported at
FIELDS = {
    "inputs": ('inputs: {data: {path: "%s"}}\n', "inputs.data.path"),
    "build": ('environment: {build: {path: "%s"}}\n', "environment.build.path"),
    "code": ('code: "%s"\n', "code"),
}


def project(tmp_path: Path, field: str, value: str) -> Path:
    """A spec outside any repository (nothing holds its paths to a project) whose ``field`` is ``value``."""
    folder = tmp_path / "work"
    (folder / "code").mkdir(parents=True)
    (folder / "code" / "train.py").write_text("print('hello')\n")
    line, _ = FIELDS[field]
    spec = folder / "spec.yaml"
    spec.write_text(SPEC + (line % value) + ("code: code\n" if field != "code" else ""))
    return spec


def errors(stderr: str):
    return [line for line in stderr.splitlines() if ": error: " in line]


@pytest.mark.parametrize("field", ["inputs"])  # code: refused as the root; build: no Dockerfile there
def test_a_folder_that_is_the_whole_disk_is_refused_never_walked(tmp_path, field):
    """The fuzzer's case as it was: outside a repository, `..` enough times to reach `/`. A
    machine's root holds far more than 100,000 entries (/proc and /sys alone), so the walk stops
    there and says so; before, `compile` found no end within 10 s (ts bounds the wait)."""
    spec = project(tmp_path, field, "/".join([".."] * (len(tmp_path.parts) + 2)))
    for command in (["validate"], ["compile", "-o", str(tmp_path / "out")]):
        proc = ts(*command, str(spec), cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        found = [line for line in errors(proc.stderr) if "holds more than 100,000 files and folders" in line]
        assert len(found) == 1 and LOCATED.match(found[0]), proc.stderr
        assert f"error: {FIELDS[field][1]}: " in found[0] and "(hint: " in found[0]
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_shipped_folder_over_the_limit_is_one_located_error(tmp_path, monkeypatch, capsys, field):
    """The limit itself, made small: one error at the field, with its hint, instead of a listing
    of what the folder holds; a folder at the limit is walked and checked as before."""
    from trainspec.cli import main
    from trainspec.core import files

    monkeypatch.setattr(files, "SHIPPED_LIMIT", 40)
    big = tmp_path / "work" / "big"
    big.mkdir(parents=True)
    for i in range(41):
        (big / f"f{i:02d}.txt").write_text("x")
    spec = project(tmp_path, field, "big")
    if field == "build":
        (big / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["validate", str(spec)])
    err = capsys.readouterr().err
    assert done.value.code == 1, err
    found = errors(err)
    assert len(found) == 1 and LOCATED.match(found[0]), err
    assert f"error: {FIELDS[field][1]}: 'big' holds more than 40 files and folders" in found[0]
    assert "(hint: " in found[0]

    # exactly 40 entries (files, the Dockerfile, a link): walked and checked as before
    keep = 40 - 1 - (field == "build")
    for extra in sorted(p for p in big.iterdir() if p.name.startswith("f"))[keep:]:
        extra.unlink()
    os.symlink("/etc/passwd", big / "leak")
    assert len(list(big.iterdir())) == 40
    with pytest.raises(SystemExit) as done:
        main(["validate", str(spec)])
    err = capsys.readouterr().err
    assert done.value.code == 1 and "holds more than" not in err, err
    assert "leak is a symbolic link" in err


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_shipped_folder_that_is_a_link_loop_is_a_located_error(tmp_path, field):
    loop = tmp_path / "work" / "loop-a"
    loop.parent.mkdir(parents=True)
    loop.symlink_to("loop-b")
    (tmp_path / "work" / "loop-b").symlink_to("loop-a")
    spec = project(tmp_path, field, str(loop))
    for command in (["validate"], ["compile", "-o", str(tmp_path / "out")]):
        proc = ts(*command, str(spec), cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert any(LOCATED.match(line) and f"error: {FIELDS[field][1]}: " in line for line in errors(proc.stderr)), \
            proc.stderr
    assert not (tmp_path / "out").exists()


def test_resolving_a_link_loop_answers_a_path_never_raises(tmp_path):
    from trainspec.core.memo import one_command
    from trainspec.schema.loader import resolved

    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    with one_command():
        assert resolved(tmp_path / "loop-a").parent == tmp_path.resolve()
        assert resolved(tmp_path / "loop-a" / "x").name == "x"
    assert resolved(REPO / "specs" / ".." / "README.md") == (REPO / "README.md").resolve()


def test_checks_cache_keeps_no_key_for_a_folder_over_the_limit(tmp_path, monkeypatch):
    """check's cache keys a job on the folders it ships: one over the limit has no key (a miss,
    compiled and refused by validation), never a digest of its first entries."""
    from trainspec.core import files
    from trainspec.review import cache

    for i in range(5):
        (tmp_path / f"f{i}").write_text(str(i))
    assert cache._folder_digest(tmp_path) is not None
    monkeypatch.setattr(files, "SHIPPED_LIMIT", 4)
    assert cache._folder_digest(tmp_path) is None
