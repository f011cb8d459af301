"""check shares the specs it compiles with one forked worker process (cli/check.py's
_build_all): what it prints and its exit code are those of a single process, in the same order,
and a worker that fails is reported and its specs compiled by the process that started it."""

import os
import shutil
import sys

import pytest

from conftest import REPO, edit

sys.path.insert(0, str(REPO / "benchmarks"))
from check_500 import make_repository  # noqa: E402  the benchmark's team repository, smaller


@pytest.fixture
def team(tmp_path):
    """12 specs extending bases/gpu.yaml, their outputs committed, and some of them wrong: a stale
    output, a missing one, a copied job name, an orphaned folder."""
    root = make_repository(tmp_path / "repo", 12)
    edit(root / "specs" / "job-0002.yaml", 'RUN: "2"', 'RUN: "two"')  # stale
    shutil.rmtree(root / "build" / "job-0005")  # missing
    edit(root / "specs" / "job-0009.yaml", "name: job-0009", "name: job-0003")  # a copied name
    return root


def check(root, cache, monkeypatch, capsys, fork_from):
    import trainspec.cli.check
    from trainspec.cli import main

    monkeypatch.setattr(trainspec.cli.check, "FORK_FROM", fork_from)
    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", str(cache))
    monkeypatch.chdir(root)
    with pytest.raises(SystemExit) as exit:
        main(["check", "specs/", "--out", "build/"])
    captured = capsys.readouterr()
    return exit.value.code, captured.out, captured.err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="check forks a worker only with a second core")
def test_a_forked_check_prints_what_one_process_prints(team, tmp_path, monkeypatch, capsys):
    alone = check(team, tmp_path / "c1", monkeypatch, capsys, fork_from=10**9)
    assert alone[0] == 1 and "job-0003" in alone[2]  # the copied name: the specs' error, before any output
    shared = check(team, tmp_path / "c2", monkeypatch, capsys, fork_from=2)
    assert shared == alone
    edit(team / "specs" / "job-0009.yaml", "name: job-0003", "name: job-0009")
    alone = check(team, tmp_path / "c3", monkeypatch, capsys, fork_from=10**9)
    assert alone[0] == 1 and "stale" in alone[1] and "missing" in alone[1]
    assert check(team, tmp_path / "c4", monkeypatch, capsys, fork_from=2) == alone
    assert check(team, tmp_path / "c4", monkeypatch, capsys, fork_from=2) == alone  # its cache, warm


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="check forks a worker only with a second core")
def test_a_failed_worker_is_reported_and_its_specs_checked_here(team, tmp_path, monkeypatch, capsys):
    import trainspec.build

    edit(team / "specs" / "job-0009.yaml", "name: job-0003", "name: job-0009")
    alone = check(team, tmp_path / "c1", monkeypatch, capsys, fork_from=10**9)
    here = os.getpid()
    real = trainspec.build.build

    def build(file, *args, **kwargs):
        if os.getpid() != here:
            os._exit(7)  # the worker dies at its first spec
        return real(file, *args, **kwargs)

    monkeypatch.setattr(trainspec.build, "build", build)
    code, out, err = check(team, tmp_path / "c2", monkeypatch, capsys, fork_from=2)
    note = "trainspec check: the worker process failed (exit status 7); checking its 6 spec(s) here\n"
    assert (code, out, err) == (alone[0], alone[1], note + alone[2])
