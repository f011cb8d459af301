"""check shares its files with one forked worker process (cli/check.py's _check_all): each
process reads what its half extends, looks it up in the cache, compiles it and compares the
outputs; what check prints, its exit code and the cache it leaves are those of a single process,
a worker that fails is reported and its files checked by the process that started it, and one
that is interrupted takes its worker with it."""

import os
import re
import shutil
import sys

import pytest

from conftest import REPO, edit

sys.path.insert(0, str(REPO / "benchmarks"))
from check_500 import make_repository  # noqa: E402  the benchmark's team repository, smaller

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
two_cores = pytest.mark.skipif(CORES < 2 or not hasattr(os, "fork"),
                               reason="check forks a worker only on a system that forks, with a second core")


@pytest.fixture
def team(tmp_path):
    """12 specs extending bases/gpu.yaml, their outputs committed, and some of them wrong: a stale
    output, a missing one, a hand-edited one, a copied job name, an invalid spec."""
    root = make_repository(tmp_path / "repo", 12)
    edit(root / "specs" / "job-0002.yaml", 'RUN: "2"', 'RUN: "two"')  # stale
    shutil.rmtree(root / "build" / "job-0005")  # missing
    hand = next(p for p in sorted((root / "build" / "job-0007").rglob("*")) if p.is_file())
    hand.write_bytes(hand.read_bytes() + b"# an edit\n")  # hand-edited
    edit(root / "specs" / "job-0009.yaml", "name: job-0009", "name: job-0003")  # a copied name
    edit(root / "specs" / "job-0011.yaml", "name: job-0011", "name: job-0011\nnodes: lots")  # invalid
    return root


def check(root, cache, monkeypatch, capsys, fork_from):
    """(exit code, stdout, stderr, the cache's files by name) of one check."""
    import trainspec.cli.check
    from trainspec.cli import main

    monkeypatch.setattr(trainspec.cli.check, "FORK_FROM", fork_from)
    monkeypatch.setattr(trainspec.cli.check, "CHUNK", 2)  # 12 files: 6 tickets
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine, whatever this one does
    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", str(cache))
    monkeypatch.chdir(root)
    with pytest.raises(SystemExit) as exit:
        main(["check", "specs/", "--out", "build/"])
    captured = capsys.readouterr()
    files = {p.relative_to(cache).as_posix(): p.read_bytes() for p in sorted(cache.rglob("*")) if p.is_file()}
    return exit.value.code, captured.out, captured.err, files


def compilers(monkeypatch, log):
    """Record in ``log`` the process id of every spec compile (from either process)."""
    import trainspec.registry.build

    real = trainspec.registry.build.build

    def build(file, *args, **kwargs):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real(file, *args, **kwargs)

    monkeypatch.setattr(trainspec.registry.build, "build", build)
    return lambda: log.read_text().split() if log.exists() else []


@two_cores
def test_a_forked_check_prints_and_caches_what_one_process_does(team, tmp_path, monkeypatch, capsys):
    pids = compilers(monkeypatch, tmp_path / "pids")
    alone = check(team, tmp_path / "c1", monkeypatch, capsys, fork_from=10**9)
    assert alone[0] == 1 and "job-0003" in alone[2] and "nodes" in alone[2]  # the specs' errors, before any output
    assert len(set(pids())) == 1
    shared = check(team, tmp_path / "c2", monkeypatch, capsys, fork_from=2)
    assert shared == alone[:3] + (shared[3],)
    assert len(set(pids())) == 2  # a second process compiled some of them
    assert shared[3] == alone[3] and any(name.startswith("extends-") for name in shared[3])

    edit(team / "specs" / "job-0009.yaml", "name: job-0003", "name: job-0009")
    edit(team / "specs" / "job-0011.yaml", "name: job-0011\nnodes: lots", "name: job-0011")
    alone = check(team, tmp_path / "c3", monkeypatch, capsys, fork_from=10**9)
    assert alone[0] == 1 and all(kind in alone[1] for kind in ("stale", "missing", "hand-edited"))
    assert check(team, tmp_path / "c4", monkeypatch, capsys, fork_from=2) == alone  # its cache as well
    assert check(team, tmp_path / "c4", monkeypatch, capsys, fork_from=2) == alone  # that cache, warm
    assert check(team, tmp_path / "c3", monkeypatch, capsys, fork_from=10**9) == alone
    # a copied name beside warm caches: the cached spec with that name is compiled again
    edit(team / "specs" / "job-0010.yaml", "name: job-0010", "name: job-0004")
    alone = check(team, tmp_path / "c3", monkeypatch, capsys, fork_from=10**9)
    assert alone[0] == 1 and "job-0004" in alone[2]
    assert check(team, tmp_path / "c4", monkeypatch, capsys, fork_from=2) == alone


@two_cores
def test_bases_among_the_specs_are_left_out_whichever_process_reads_them(team, tmp_path, monkeypatch, capsys):
    # specs/aa/base.yaml sorts first and is extended by a spec of each half; specs/zz/base.yaml
    # sorts last and is extended by the last spec only, which the worker reads
    edit(team / "specs" / "job-0009.yaml", "name: job-0003", "name: job-0009")
    edit(team / "specs" / "job-0011.yaml", "name: job-0011\nnodes: lots", "name: job-0011")
    for folder in ("aa", "zz"):
        (team / "specs" / folder).mkdir()
        (team / "specs" / folder / "base.yaml").write_text("extends: ../../bases/gpu.yaml\n")
    for spec, base in (("job-0000", "aa"), ("job-0010", "aa"), ("job-0011", "zz")):
        edit(team / "specs" / f"{spec}.yaml", "extends: ../bases/gpu.yaml", f"extends: {base}/base.yaml")
    alone = check(team, tmp_path / "c1", monkeypatch, capsys, fork_from=10**9)
    assert "base.yaml" not in alone[1] + alone[2] and "12 output folder(s)" not in alone[2]
    assert check(team, tmp_path / "c2", monkeypatch, capsys, fork_from=2) == alone


@two_cores
def test_a_failed_worker_is_reported_and_its_files_checked_here(team, tmp_path, monkeypatch, capsys):
    import trainspec.registry.build

    edit(team / "specs" / "job-0009.yaml", "name: job-0003", "name: job-0009")
    alone = check(team, tmp_path / "c1", monkeypatch, capsys, fork_from=10**9)
    here = os.getpid()
    real = trainspec.registry.build.build

    def build(file, *args, **kwargs):
        if os.getpid() != here:
            os._exit(7)  # the worker dies at its first spec
        return real(file, *args, **kwargs)

    monkeypatch.setattr(trainspec.registry.build, "build", build)
    code, out, err, cached = check(team, tmp_path / "c2", monkeypatch, capsys, fork_from=2)
    note, _, err = err.partition("\n")
    # the worker takes the last chunk at least, and more tickets while this process is busy
    assert re.fullmatch(r"trainspec check: the worker process failed \(exit status 7\); checking the "
                        r"([1-9]|1[01]) file\(s\) it took here", note)
    assert (code, out, err, cached) == alone


@two_cores
def test_an_interrupted_check_kills_and_reaps_its_worker(team, tmp_path, monkeypatch, capsys):
    import signal

    import trainspec.registry.build

    here = os.getpid()
    real = trainspec.registry.build.build
    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    def build(file, *args, **kwargs):
        if os.getpid() != here:
            signal.pause()  # the worker would compile for ever: only SIGKILL ends it
        if forked:
            raise KeyboardInterrupt  # ^C in this process, once the worker runs
        return real(file, *args, **kwargs)

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(trainspec.registry.build, "build", build)
    code, _, err, _ = check(team, tmp_path / "c", monkeypatch, capsys, fork_from=2)
    assert (code, err) == (130, "trainspec: interrupted\n")
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)  # reaped already: no zombie left


def test_one_core_checks_in_this_process(team, tmp_path, monkeypatch, capsys):
    pids = compilers(monkeypatch, tmp_path / "pids")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    check(team, tmp_path / "c", monkeypatch, capsys, fork_from=2)
    assert set(pids()) == {str(os.getpid())}


@pytest.mark.parametrize("load, forks", [(0.9, True), (1.0, True), (1.1, False), (3.5, False)])
def test_a_second_process_only_while_a_core_is_free(monkeypatch, load, forks):
    from trainspec.cli.check import _free_core

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert _free_core() is forks
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert _free_core() is (load <= 3)  # 4 cores: one is free while the load is 3 or less
    monkeypatch.delattr(os, "fork", raising=False)
    assert _free_core() is False
