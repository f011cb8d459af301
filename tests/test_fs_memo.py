"""File-system answers are remembered for exactly one command (trainspec/core/memo.py): asked
once per path while a command runs, never seen by the next command in the same process."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trainspec.core import files, memo
from trainspec.schema import loader

REPO = Path(__file__).resolve().parents[1]


def repository(tmp_path: Path) -> Path:
    """A repository with one spec whose conda file is reached through `envs`, a link to a
    folder inside it; an `outside.yml` next to the repository."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", root / "code", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "conda").mkdir()
    (root / "conda" / "env.yml").write_text("dependencies: [python]\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "env.yml").write_text("dependencies: [python]\n")
    os.symlink("../conda", root / "specs" / "envs")
    # an Azure ML job: a conda file is what its environment is built from (on Kubernetes it is an
    # error whatever the path, since nothing in a pod would create the environment)
    (root / "specs" / "k8s.yaml").write_text(
        "version: 1\nname: memo\ncode: ../code\ncommand: python train.py --steps 1\n"
        "resources: {nodes: 1, sku: Standard_NC24ads_A100_v4}\n"
        "environment:\n  conda_file: envs/env.yml\n  image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\n"
        "targets:\n  azureml: {compute: gpu-cluster}\n")
    return root


def validate(capsys) -> tuple:
    from trainspec.cli import main

    with pytest.raises(SystemExit) as exit:
        main(["validate", "specs/k8s.yaml"])
    return exit.value.code, capsys.readouterr().err


def test_a_second_command_in_the_same_process_sees_a_link_changed_between_them(tmp_path, monkeypatch, capsys):
    root = repository(tmp_path)
    monkeypatch.chdir(root)
    code, err = validate(capsys)
    assert code == 0 and "error:" not in err, err
    os.remove(root / "specs" / "envs")
    os.symlink(str(tmp_path / "elsewhere"), root / "specs" / "envs")  # now leads out of the repository
    code, err = validate(capsys)
    assert code == 1
    assert "error: environment.conda_file: 'envs/env.yml' leads through a symbolic link to " \
           f"{tmp_path / 'elsewhere' / 'env.yml'}, outside the repository" in err, err
    assert memo._ANSWERS is None  # nothing is remembered between commands


def test_within_a_command_each_path_is_asked_once(tmp_path):
    tmp_path = tmp_path.resolve()
    link = tmp_path / "link"
    os.symlink("a", link)
    with memo.one_command():
        assert loader.real_path(link) == tmp_path / "a"
        assert loader.repository_root(tmp_path) is None
        os.remove(link)
        os.symlink("b", link)
        (tmp_path / ".git").mkdir()
        assert loader.real_path(link) == tmp_path / "a"  # the answer of this command
        assert loader.repository_root(tmp_path) is None
        assert loader.real_path(f"{tmp_path}/./link") == tmp_path / "b"  # another path: asked
    assert loader.real_path(link) == tmp_path / "b"  # outside a command: always asked
    assert loader.repository_root(tmp_path) == tmp_path


def test_a_problem_is_an_answer_too(tmp_path):
    loop = tmp_path / "loop"
    os.symlink("loop", loop)
    with memo.one_command():
        for _ in range(2):
            with pytest.raises(loader.ReadProblem, match="symbolic link loop"):
                loader.real_path(loop)
            assert loader.resolved(loop) == tmp_path.resolve() / "loop"  # a loop resolves as far as it goes


def test_a_relative_path_is_answered_for_the_folder_it_was_asked_from(tmp_path, monkeypatch):
    tmp_path = tmp_path.resolve()
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        os.symlink(name, tmp_path / name / "here")
    with memo.one_command():
        monkeypatch.chdir(tmp_path / "one")
        assert loader.real_path("here") == tmp_path / "one" / "one"
        monkeypatch.chdir(tmp_path / "two")
        assert loader.real_path("here") == tmp_path / "two" / "two"


def test_a_relative_path_in_a_deleted_working_folder_is_asked_as_before(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with memo.one_command():
        for _ in range(2):
            with pytest.raises(loader.ReadProblem, match="no such file"):
                loader.read_bounded("spec.yaml")


def test_a_nested_command_starts_with_no_answers_and_the_outer_ones_come_back(tmp_path):
    tmp_path = tmp_path.resolve()
    link = tmp_path / "link"
    os.symlink("a", link)
    with memo.one_command():
        assert loader.real_path(link) == tmp_path / "a"
        os.remove(link)
        os.symlink("b", link)
        with memo.one_command():
            assert loader.real_path(link) == tmp_path / "b"
        assert loader.real_path(link) == tmp_path / "a"
    assert memo._ANSWERS is None


def test_inside_compares_whole_parts():
    assert files.inside(Path("/repo"), Path("/repo"))
    assert files.inside(Path("/repo/a/b"), Path("/repo"))
    assert files.inside(Path("/repo"), Path("/"))
    assert not files.inside(Path("/repo-other/a"), Path("/repo"))
    assert not files.inside(Path("/"), Path("/repo"))
    assert files.in_repository(Path("/repo/.github/x"), Path("/repo"))
    assert not files.in_repository(Path("/repo/.git/config"), Path("/repo"))
    assert not files.in_repository(Path("/repo/.git"), Path("/repo"))


@pytest.mark.parametrize("size", [0, 5, 10, 11, 50])
def test_a_bounded_read_returns_at_most_limit_plus_one_bytes(tmp_path, size):
    file = tmp_path / "f"
    file.write_bytes(b"x" * size)
    assert loader.read_bounded(file, limit=10) == b"x" * min(size, 11)
    assert files.read_regular(file, 10) == b"x" * min(size, 11)
    assert files.read_regular(file) == b"x" * size


def test_a_file_that_grew_since_its_stat_is_read_on_to_the_limit(tmp_path):
    file = tmp_path / "f"
    file.write_bytes(b"x" * 8)
    for stale, limit, expected in ((3, 10, 8), (3, 5, 6), (0, 10, 8), (3, None, 8), (0, None, 8), (20, None, 8)):
        fd = os.open(file, os.O_RDONLY)
        try:
            assert files.read_open(fd, stale, limit) == b"x" * expected
        finally:
            os.close(fd)
