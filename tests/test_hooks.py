"""The pre-commit hooks in the layout the docs recommend (docs/gitops.md) -- specs/ extending bases/, a team
catalog trainspec-skus.yaml at the root -- through the real pre-commit in a fresh repository: a
changed base or catalog validates the specs that read it, and a base is never validated alone."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, edit, git, spec_repo, ts
from test_review import BASE, child, pre_commit_tool, readme_block

CATALOG = "skus:\n  Standard_ND96isr_H200_v5:\n    gpus: 8\n    gpu: H200\n    infiniband: true\n"


@pytest.fixture
def team(tmp_path):
    repo = spec_repo(tmp_path)
    (repo / "bases").mkdir()
    (repo / "bases" / "gpu.yaml").write_text(BASE)
    (repo / "bases" / "h200.yaml").write_text("extends: gpu.yaml\nresources:\n  sku: Standard_ND96isr_H200_v5\n")
    (repo / "trainspec-skus.yaml").write_text(CATALOG)
    (repo / "specs" / "job-a.yaml").write_text(child("job-a"))
    (repo / "specs" / "job-b.yaml").write_text(child("job-b").replace("../bases/gpu.yaml", "../bases/h200.yaml")
                                               + "resources:\n  gpus_per_node: 8\n")
    # a base kept beside its specs, extended by one of them
    (repo / "specs" / "local-base.yaml").write_text(BASE)
    (repo / "specs" / "job-c.yaml").write_text(child("job-c").replace("../bases/gpu.yaml", "local-base.yaml"))
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "a team's layout", cwd=repo)
    return repo


def pre_commit(repo, tmp_path, *files):
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-cache"),
               TRAINSPEC_CACHE_DIR=str(tmp_path / "trainspec-cache"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    which = ["--files", *files] if files else ["--all-files"]
    return subprocess.run([pre_commit_tool(), "run", *which], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(params=["README snippet", "shipped hooks"])
def hooks(request, team, tmp_path):
    if request.param == "README snippet":
        (team / ".pre-commit-config.yaml").write_text(readme_block("repo: local"))
    else:
        hooks = tmp_path / "hooks"
        shutil.copytree(REPO, hooks, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "__pycache__", "*.egg-info", ".pytest_cache", "golden", "results"))
        git("init", "-q", "-b", "main", cwd=hooks)
        git("add", "-A", cwd=hooks)
        git("commit", "-q", "-m", "hooks", cwd=hooks)
        rev = git("rev-parse", "HEAD", cwd=hooks).strip()
        (team / ".pre-commit-config.yaml").write_text(
            f"repos:\n  - repo: {hooks}\n    rev: {rev}\n    hooks:\n"
            "      - id: trainspec-validate\n      - id: trainspec-check\n")
    git("add", "-A", cwd=team)
    return team


def test_hooks_in_the_recommended_layout(hooks, tmp_path):
    team = hooks
    good = pre_commit(team, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr  # bases (in bases/ and beside specs) pass

    # a commit that touches only a base: the hook validates the specs on it, at any depth
    only_base = pre_commit(team, tmp_path, "bases/gpu.yaml", "specs/local-base.yaml")
    assert only_base.returncode == 0, only_base.stdout + only_base.stderr
    assert re.search(r"^trainspec validate\.+Passed$", only_base.stdout, re.M), only_base.stdout

    # a broken base: reported at its own line, for the specs that extend it
    edit(team / "bases" / "gpu.yaml", "  nodes: 2\n", "  nodes: 0\n")
    git("add", "-A", cwd=team)
    bad = pre_commit(team, tmp_path, "bases/gpu.yaml")
    assert bad.returncode == 1
    assert "bases/gpu.yaml:3:10: error: resources.nodes: expected greater than or equal to 1" in bad.stdout
    assert "bases/gpu.yaml: a base of 2 spec(s): validating them instead" in bad.stdout  # job-a, and job-b via h200
    git("checkout", "-q", "HEAD", "--", "bases/gpu.yaml", cwd=team)

    # the team catalog: the specs that look their size up in it are validated
    edit(team / "trainspec-skus.yaml", "gpus: 8", "gpus: 4")
    git("add", "-A", cwd=team)
    catalog = pre_commit(team, tmp_path, "trainspec-skus.yaml")
    assert catalog.returncode == 1
    assert "trainspec-skus.yaml: the team catalog of 6 spec(s): validating them" in catalog.stdout
    assert "specs/job-b.yaml:7:18: error: resources.gpus_per_node: 8 GPUs per node, but Standard_ND96isr_H200_v5 " \
           "has 4" in catalog.stdout
    git("checkout", "-q", "HEAD", "--", "trainspec-skus.yaml", cwd=team)

    # check runs on every commit, whatever changed: here a conda file's neighbour, a hand edit
    edit(team / "build" / "job-a" / "azureml" / "job.yml", "instance_count: 2", "instance_count: 3")
    git("add", "-A", cwd=team)
    edited = pre_commit(team, tmp_path, "build/job-a/azureml/job.yml")
    assert edited.returncode == 1 and "build/job-a/azureml/job.yml: hand-edited" in edited.stdout


def test_validate_given_a_base_validates_its_specs(team):
    proc = ts("validate", "specs/local-base.yaml", cwd=team)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "specs/local-base.yaml: a base of 1 spec(s): validating them instead\n" \
                          "1 spec: 0 errors, 0 warnings\n"
    proc = ts("validate", "bases/gpu.yaml", "specs/job-a.yaml", cwd=team / "specs")  # from another folder too
    assert proc.returncode == 1 and "no such file" in proc.stderr  # paths are the user's: relative to where they are
    proc = ts("validate", "../bases/gpu.yaml", "job-a.yaml", cwd=team / "specs")
    assert proc.returncode == 0, proc.stderr
    assert "../bases/gpu.yaml: a base of 2 spec(s): validating them instead\n2 specs: 0 errors" in proc.stderr
    # a file nothing extends is a spec, and says what it lacks
    (team / "bases" / "unused.yaml").write_text("version: 1\nresources:\n  nodes: 2\n")
    proc = ts("validate", "bases/unused.yaml", cwd=team)
    assert proc.returncode == 1 and "bases/unused.yaml:1:1: error: name: is required" in proc.stderr
