"""The code folder in a job's name (review/naming.py digest_of, review/cache.py code_digest): read
once per folder in a command however many specs and targets share it, and not at all by a later
command while its files' stats say they are unchanged (check's cache folder remembers them), yet
a changed file is always a new job name: the remembered hashes make plan faster, never different."""

import io
import json
import os
import time

import pytest

from test_jobs_command import main

SPEC = """version: 1
name: job-{i}
code: ../code
command: python train.py --seed {i}
resources: {{nodes: 2, gpus_per_node: 1}}
environment: {{image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime}}
targets: {{slurm: {{}}, azureml: {{compute: gpu-cluster}}}}
"""
SPECS = 3
TARGETS = 2
AN_HOUR_AGO = time.time_ns() - 3600 * 10**9


@pytest.fixture
def team(tmp_path, monkeypatch):
    """Three specs sharing one code folder of 41 files in sub-folders, last written an hour ago, as
    a checkout's files usually are."""
    code = tmp_path / "code"
    for n in range(40):
        path = code / f"pkg{n % 4}" / f"module_{n}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {n}\n")
    (code / "train.py").write_text("print('train')\n")
    for path in code.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(AN_HOUR_AGO, AN_HOUR_AGO))
    (tmp_path / "specs").mkdir()
    for i in range(SPECS):
        (tmp_path / "specs" / f"job-{i}.yaml").write_text(SPEC.format(i=i))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def opened(monkeypatch, team):
    """How many times each file under code/ was opened, by any route."""
    counts = {}
    watched = str(team / "code")

    def count(path):
        path = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if path.startswith(watched):
            counts[path] = counts.get(path, 0) + 1

    real_os_open, real_open = os.open, io.open

    def os_open(path, *args, **kwargs):
        count(path)
        return real_os_open(path, *args, **kwargs)

    def open_(file, *args, **kwargs):
        count(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", open_)
    monkeypatch.setattr("builtins.open", open_)
    return counts


def plan_names(capsys):
    capsys.readouterr()
    assert main("plan", "specs/", "--format", "json") == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    names = [t["job"]["name"] for job in jobs for t in job["targets"]]
    assert len(names) == SPECS * TARGETS and len(set(names)) == len(names)
    return names


def test_plan_reads_a_shared_code_folder_once_and_a_second_plan_only_what_changed(team, opened, capsys):
    files = sorted(str(p) for p in (team / "code").rglob("*") if p.is_file())
    # one plan of three specs for two targets each: every code file read once, not six times
    first = plan_names(capsys)
    assert opened == dict.fromkeys(files, 1)
    # a second plan: the stats say nothing changed, so nothing is read; the same names
    opened.clear()
    assert plan_names(capsys) == first
    assert opened == {}
    # a file rewritten with bytes of the same size and its old modification time put back: its
    # change time differs, so it alone is read again, and every job gets a new name
    changed = team / "code" / "pkg1" / "module_5.py"
    changed.write_text("VALUE = 6\n")
    os.utime(changed, ns=(AN_HOUR_AGO, AN_HOUR_AGO))
    opened.clear()
    after = plan_names(capsys)
    assert opened == {str(changed): 1}
    assert all(a != b for a, b in zip(first, after))
    # the names are those of a plan without any cache
    os.environ["TRAINSPEC_CACHE_DIR"] = ""  # restored by conftest's monkeypatch
    opened.clear()
    assert plan_names(capsys) == after
    assert opened == dict.fromkeys(files, 1)


def test_a_file_written_just_now_is_read_again_by_the_next_plan(team, opened, capsys):
    """A file modified within SETTLED_NS of being hashed is not remembered: a second write in the
    same tick of the file system's clock would leave its stat as it was."""
    fresh = team / "code" / "train.py"
    fresh.write_text("print('tuned')\n")  # modified now
    first = plan_names(capsys)
    opened.clear()
    assert plan_names(capsys) == first
    assert opened == {str(fresh): 1}


def test_review_reads_a_shared_code_folder_once_and_extracts_it_only_for_a_spec_whose_inputs_differ(
        team, opened, capsys, monkeypatch):
    """review --git: a code folder the specs share, the same at the base and in the working tree
    (git's tree ids, nothing modified, untracked or ignored in it), is not extracted from the base
    revision (review/revision.py Sparse) nor hashed there: its files are read once, for the job
    names. A spec whose inputs differ is compiled at the base, and then the folder is extracted."""
    import tarfile

    from conftest import git
    from trainspec.review import revision

    extracted = []
    real_extract = revision._extract  # what every archive of the base revision is extracted by

    def extract(archive, tree):
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            extracted.extend(m.name for m in tar.getmembers() if m.isfile() and m.name.startswith("code/"))
        real_extract(archive, tree)

    monkeypatch.setattr(revision, "_extract", extract)
    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", "")  # every code file read for the job names: once
    git("init", "-q", "-b", "main", cwd=team)
    git("add", "-A", cwd=team)
    git("commit", "-q", "-m", "specs", cwd=team)
    files = sorted(str(p) for p in (team / "code").rglob("*") if p.is_file())
    # a new spec that ships the same folder, and a file no spec reads: every base spec is the same
    (team / "specs" / "job-3.yaml").write_text(SPEC.format(i=3))
    (team / "README.md").write_text("the team's jobs\n")

    def review():
        capsys.readouterr()
        opened.clear()
        assert main("review", "--git", "main", "specs/", "--format", "json") == 0
        return json.loads(capsys.readouterr().out)["diff"]["jobs"]

    jobs = review()
    assert [(j["name"], j["status"]) for j in jobs] == [("job-3", "new")]
    assert extracted == []
    assert opened == dict.fromkeys(files, 1)
    # a spec whose command changed is compiled at the base too, which reads the folder: extracted
    # then, and the review is what it always was
    (team / "specs" / "job-0.yaml").write_text(SPEC.format(i=0).replace("--seed 0", "--seed 10"))
    jobs = review()
    assert [(j["name"], j["status"]) for j in jobs] == [("job-0", "changed"), ("job-3", "new")]
    assert [c["field"] for c in jobs[0]["changes"]] == ["command"]
    assert not jobs[0]["base_errors"]
    assert len(extracted) == len(files)


def test_what_submit_stages_inside_the_code_folder_never_changes_the_jobs_name(tmp_path):
    """A code folder at the repository's top holds .trainspec/, where submit stages each job (on
    Slurm with a copy of the code): counted in the digest, every submit would give the job a new
    name, and the next submit would submit it again instead of following it."""
    from trainspec.review.cache import code_digest

    (tmp_path / "train.py").write_text("print('train')\n")
    before = code_digest(str(tmp_path))
    staged = tmp_path / ".trainspec" / "jobs" / "x-0123456789" / "slurm" / "code"
    staged.mkdir(parents=True)
    (staged / "train.py").write_text("print('train')\n")
    assert code_digest(str(tmp_path)) == before
    (tmp_path / "train.py").write_text("print('changed')\n")
    assert code_digest(str(tmp_path)) != before  # the code itself still counts
