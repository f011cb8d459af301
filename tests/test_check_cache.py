"""check's cache (trainspec/cache.py) makes check faster, never different: with a warm cache,
any change to any byte check depends on is still found, a broken or unwritable cache is
ignored, and what check prints is what it prints without the cache."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO, edit, path_env, ts

sys.path.insert(0, str(REPO / "benchmarks"))
from check_500 import make_repository  # noqa: E402  the benchmark's team repository, smaller


@pytest.fixture
def team(tmp_path):
    """specs/ extending bases/gpu.yaml, trainspec-skus.yaml at the root, outputs committed."""
    return make_repository(tmp_path / "repo", 6)


def check(root, cache):
    env = path_env(TRAINSPEC_CACHE_DIR=str(cache))
    proc = ts("check", "specs/", "--out", "build/", cwd=root, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_warm_cache_is_used_and_lives_only_in_the_cache_folder(team, tmp_path):
    cache = tmp_path / "cache"
    before = sorted(p.relative_to(team) for p in team.rglob("*") if ".git" not in p.parts)
    assert check(team, cache) == (0, "", "trainspec check: 6 output folder(s) in build/ match their specs\n")
    written = list(cache.glob("check-*/*.json"))
    assert len(written) == 1 and len(list(cache.glob("extends-*.json"))) == 1
    records = json.loads(written[0].read_text())["records"]
    assert sorted(Path(k).name for k in records) == [f"job-{i:04d}.yaml" for i in range(6)]
    assert sorted(p.relative_to(team) for p in team.rglob("*") if ".git" not in p.parts) == before  # nothing in -o
    assert check(team, cache) == (0, "", "trainspec check: 6 output folder(s) in build/ match their specs\n")


def test_a_warm_check_compiles_nothing_but_what_changed(team, tmp_path, monkeypatch, capsys):
    import trainspec.registry.build
    from trainspec.cli import main

    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(team)
    compiled = []
    real = trainspec.registry.build.build
    monkeypatch.setattr(trainspec.registry.build, "build", lambda file, *a, **k: compiled.append(file) or real(file, *a, **k))

    def run():
        compiled.clear()
        with pytest.raises(SystemExit) as exit:
            main(["check", "specs/", "--out", "build/"])
        return exit.value.code

    assert run() == 0 and len(compiled) == 6  # cold
    assert run() == 0 and compiled == []  # warm
    edit(team / "specs" / "job-0001.yaml", 'RUN: "1"', 'RUN: "one"')
    assert run() == 1 and compiled == ["specs/job-0001.yaml"]
    edit(team / "bases" / "gpu.yaml", "timeout: 2d", "timeout: 3d")
    assert run() == 1 and len(compiled) == 6  # every spec reads the base


def test_default_cache_folder_follows_xdg(team, tmp_path):
    env = path_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("TRAINSPEC_CACHE_DIR", None)
    assert ts("check", "specs/", "--out", "build/", cwd=team, env=env).returncode == 0
    assert len(list((tmp_path / "xdg" / "trainspec").glob("check-*/*.json"))) == 1


CHANGES = {
    "spec": lambda r: edit(r / "specs" / "job-0001.yaml", "RUN: \"1\"", "RUN: \"one\""),
    "spec, one byte of a comment": lambda r: (r / "specs" / "job-0001.yaml").write_text(
        (r / "specs" / "job-0001.yaml").read_text() + "# x\n"),
    "base": lambda r: edit(r / "bases" / "gpu.yaml", "timeout: 2d", "timeout: 3d"),
    "team catalog": lambda r: edit(r / "trainspec-skus.yaml", "gpus: 8", "gpus: 4"),
    # specs/ a repository of its own: its specs are named from there and the root catalog is not theirs
    "another repository root": lambda r: (r / "specs" / ".git").mkdir(),
    "conda file removed": lambda r: (r / "envs" / "ddp.yml").unlink(),
    "code folder removed": lambda r: shutil.rmtree(r / "examples" / "ddp"),
    "output file": lambda r: edit(r / "build" / "job-0002" / "azureml" / "job.yml", "instance_count: 3",
                                  "instance_count: 4"),
    "output file added": lambda r: (r / "build" / "job-0002" / "azureml" / "notes.txt").write_text("x\n"),
    "output file removed": lambda r: (r / "build" / "job-0002" / "azureml" / "job.yml").unlink(),
    "output folder of a gone spec": lambda r: (r / "specs" / "job-0003.yaml").unlink(),
    "foreign file": lambda r: (r / "build" / "notes.md").write_text("x\n"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_every_change_is_found_with_a_warm_cache_as_without_it(team, tmp_path, change):
    cache = tmp_path / "cache"
    assert check(team, cache)[0] == 0  # warm
    CHANGES[change](team)
    warm = check(team, cache)
    cold = check(team, "")  # an empty TRAINSPEC_CACHE_DIR: no cache at all
    assert warm == cold
    if change not in ("spec, one byte of a comment",):  # a comment changes the spec's bytes, not its job
        assert warm[0] == 1, warm
    assert check(team, cache) == cold  # and again, from the records this run left


def test_the_key_holds_every_input_the_job_reads(team, tmp_path, monkeypatch):
    """A record is looked up again only while every byte it was made from is the same: the
    conda file's bytes count although the Azure ML job only names it (it is uploaded at submit)."""
    from trainspec.registry.build import build
    from trainspec.review.cache import Cache, options_of

    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(team)
    spec = "specs/job-0000.yaml"
    cache = Cache(Path("build"), options_of([], [], []))
    cache.remember(build(spec, Path("build")))
    cache.save()
    assert Cache(Path("build"), options_of([], [], [])).lookup(spec) is not None
    assert Cache(Path("build"), options_of(["hpcpack"], [], [])).lookup(spec) is None  # other options
    assert Cache(Path("build"), options_of([], ["resources.nodes=2"], [])).lookup(spec) is None
    assert Cache(Path("other"), options_of([], [], [])).lookup(spec) is None  # another output folder
    for path in ("envs/ddp.yml", "bases/gpu.yaml", "trainspec-skus.yaml", spec):
        original = (team / path).read_bytes()
        (team / path).write_bytes(original + b"\n")
        assert Cache(Path("build"), options_of([], [], [])).lookup(spec) is None, path
        (team / path).write_bytes(original)
        assert Cache(Path("build"), options_of([], [], [])).lookup(spec) is not None, path


def test_a_base_in_the_middle_of_the_chain_that_sets_nothing_is_part_of_the_key(team, tmp_path):
    """A base that holds only `extends:` writes no field of the job, yet pointing it at another
    base changes the job: a warm check finds the stale output as a cold one does."""
    (team / "bases" / "mid.yaml").write_text("extends: gpu.yaml\n")
    edit(team / "specs" / "job-0000.yaml", "extends: ../bases/gpu.yaml", "extends: ../bases/mid.yaml")
    assert ts("compile", "specs/", "-o", "build/", cwd=team, env=path_env(TRAINSPEC_CACHE_DIR="")).returncode == 0
    cache = tmp_path / "cache"
    assert check(team, cache)[0] == 0  # warm, with job-0000 read through mid.yaml
    other = (team / "bases" / "gpu.yaml").read_text()
    assert "timeout: 2d" in other
    (team / "bases" / "other.yaml").write_text(other.replace("timeout: 2d", "timeout: 3d"))
    (team / "bases" / "mid.yaml").write_text("extends: other.yaml\n")
    warm = check(team, cache)
    assert warm == check(team, "") and warm[0] == 1 and "job-0000" in warm[1] + warm[2], warm


@pytest.mark.parametrize("damage", ["garbage", "wrong shape", "records of another shape"])
def test_a_damaged_cache_is_ignored(team, tmp_path, damage):
    cache = tmp_path / "cache"
    check(team, cache)
    edit(team / "build" / "job-0002" / "azureml" / "job.yml", "instance_count: 3", "instance_count: 4")
    (file,) = cache.glob("check-*/*.json")
    (extends,) = cache.glob("extends-*.json")
    data = json.loads(file.read_text())
    if damage == "garbage":
        file.write_bytes(b"\x00\xff{not json")
        extends.write_bytes(b"\x00\xff{not json")
    elif damage == "wrong shape":
        file.write_text(json.dumps([1, 2, 3]))
        extends.write_text(json.dumps({"a": 1}))
    else:
        for record in data["records"].values():
            record["outputs"] = {"azureml": 7}
            record["reads"] = "nope"
        file.write_text(json.dumps(data))
    assert check(team, cache) == check(team, "")


def test_an_unwritable_cache_is_ignored(team, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    assert check(team, blocker / "cache") == (0, "", "trainspec check: 6 output folder(s) in build/ match their specs\n")
    edit(team / "build" / "job-0002" / "azureml" / "job.yml", "instance_count: 3", "instance_count: 4")
    assert check(team, blocker / "cache") == check(team, "")


def test_check_prints_the_same_findings_with_and_without_the_cache(team, tmp_path):
    cache = tmp_path / "cache"
    check(team, cache)
    edit(team / "build" / "job-0002" / "azureml" / "job.yml", "instance_count: 3", "instance_count: 4")
    edit(team / "specs" / "job-0004.yaml", "nodes: 5", "nodes: 6")
    (team / "specs" / "job-0005.yaml").unlink()
    (team / "build" / "notes").mkdir()
    (team / "build" / "notes" / "a.md").write_text("x\n")
    warm = check(team, cache)
    assert warm == check(team, "")
    assert warm[0] == 1
    assert "build/job-0002/azureml/job.yml: hand-edited" in warm[1]
    assert "build/job-0004/azureml/job.yml: stale" in warm[1]
    assert "build/job-0005/azureml: orphaned" in warm[1]
    assert "build/notes: foreign" in warm[1]
