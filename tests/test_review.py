"""The GitOps loop on real files in temporary git repositories: check as the CI gate, plan and
diff for reviewers, the pre-commit hooks through the real pre-commit, and the CI example."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, trainspec_cmd

SPEC_NAMES = ["mnist-lightning.yaml", "single-node.yaml", "hpcpack-ddp.yaml"]


def run(args, cwd, check=False):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def ts(*args, cwd, check=False):
    return run([*trainspec_cmd(), *args], cwd, check)


def git(*args, cwd):
    return run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd, check=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A user's repository: specs, their training code, the compiled outputs committed."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    for name in SPEC_NAMES:
        shutil.copy(REPO / "specs" / name, root / "specs" / name)
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "schema", root / "schema")
    git("init", "-q", "-b", "main", cwd=root)
    ts("compile", "specs/", "-o", "build/", cwd=root, check=True)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs and outputs", cwd=root)
    return root


def edit(path: Path, old: str, new: str):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_check_passes_then_fails_on_hand_edit_and_stale_output(repo):
    ok = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert ok.returncode == 0 and "match their specs" in ok.stderr
    job = repo / "build" / "mnist-lightning" / "azureml" / "job.yml"
    edit(job, "instance_count: 2", "instance_count: 3")  # hand-edited
    bad = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert bad.returncode == 1
    assert "build/mnist-lightning/azureml/job.yml: differs from what its spec compiles to" in bad.stdout
    assert "-  instance_count: 3\n+  instance_count: 2" in bad.stdout  # a unified diff
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    assert ts("check", "specs/", "--out", "build/", cwd=repo).returncode == 0
    edit(repo / "specs" / "single-node.yaml", "nodes: 1", "nodes: 1\n  shm_size: 8g")  # spec changed, not recompiled
    stale = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert stale.returncode == 1 and "build/single-node/azureml/job.yml: differs" in stale.stdout
    assert "+  shm_size: 8g" in stale.stdout


def test_check_reports_missing_and_orphaned_outputs(repo):
    (repo / "build" / "single-node" / "azureml" / "conda.yml").unlink()
    git("mv", "specs/hpcpack-ddp.yaml", "specs/renamed.yaml", cwd=repo)
    edit(repo / "specs" / "renamed.yaml", "name: hpcpack-ddp", "name: renamed")
    proc = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert proc.returncode == 1
    assert "build/single-node/azureml/conda.yml: is missing" in proc.stdout
    assert "build/hpcpack-ddp/hpcpack: has no spec" in proc.stdout
    assert "build/renamed/hpcpack/job.xml: is missing" in proc.stdout


def test_diff_git_shows_the_semantic_change_first(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "  nodes: 2\n", "  nodes: 4\n")
    edit(spec, "sku: Standard_ND96isr_H100_v5", "sku: Standard_ND96amsr_A100_v4")
    git("commit", "-q", "-am", "bigger", cwd=repo)
    proc = ts("diff", "--git", "HEAD~1", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[:2]
    assert first[0] == "== specs/mnist-lightning.yaml"
    assert first[1] == "nodes 2 → 4; world 16 → 32; sku Standard_ND96isr_H100_v5 → Standard_ND96amsr_A100_v4"
    assert "-  instance_count: 2\n+  instance_count: 4" in proc.stdout
    assert "single-node" not in proc.stdout  # unchanged specs are not listed
    md = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo)
    assert "**nodes 2 → 4; world 16 → 32;" in md.stdout and "```diff" in md.stdout


def test_diff_two_files_with_gpus_per_node(tmp_path):
    base = REPO / "specs" / "single-node.yaml"
    head = tmp_path / "single-node.yaml"
    head.write_text(base.read_text().replace("../examples/", f"{REPO}/examples/")
                    .replace("  gpus_per_node: 2\n", "  gpus_per_node: 1\n"))
    proc = ts("diff", str(base), str(head), cwd=REPO)
    assert "world 2 → 1; processes per node 2 → 1; GPUs per node 2 → 1" in proc.stdout


def test_plan_for_terminal_pr_comment_and_tools(repo):
    text = ts("plan", "specs/mnist-lightning.yaml", cwd=repo, check=True).stdout
    assert "azureml: world 16 = 2 node(s) x 8 process(es), launcher per-process" in text
    last = next(line for line in text.splitlines() if "rank 15 (last):" in line)
    assert " NODE_RANK=1 " in last and " RANK=15 " in last and " LOCAL_RANK=7 " in last
    md = ts("plan", "specs/mnist-lightning.yaml", "--format", "markdown", cwd=repo, check=True).stdout
    assert md.startswith("## mnist-lightning (specs/mnist-lightning.yaml)") and "| sku | `Standard_ND96isr_H100_v5` |" in md
    data = json.loads(ts("plan", "specs/hpcpack-ddp.yaml", "--format", "json", cwd=repo, check=True).stdout)
    target = data["targets"][0]
    assert target["target"] == "hpcpack" and target["world_size"] == 8 and target["launcher"] == "per-node"
    assert target["ranks"]["first"]["MASTER_PORT"] == "29400"
    assert target["submit"].startswith("job submit /jobfile:<out>/hpcpack-ddp/hpcpack/job.xml  (after: bash ")


def test_compile_prints_the_submit_command(repo):
    proc = ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    assert "submit: az ml job create --file build/mnist-lightning/azureml/job.yml" in proc.stdout
    assert "submit: job submit /jobfile:build/hpcpack-ddp/hpcpack/job.xml" in proc.stdout


def test_ci_example_runs_only_commands_the_suite_runs():
    workflow = (REPO / "examples" / "ci" / "github-actions.yml").read_text()
    steps = [l for l in workflow.splitlines() if not l.lstrip().startswith("#") and "pip install" not in l]
    commands = set(re.findall(r"\btrainspec (\w+)", "\n".join(steps)))
    assert commands == {"validate", "check", "diff", "plan", "compile"}
    tested = "".join(p.read_text() for p in (REPO / "tests").glob("test_*.py"))
    for flag in ["--strict", "--format markdown", "--git", "--out", "-t azureml"]:
        assert flag in workflow
        assert flag.split()[0] in tested


def test_pre_commit_hooks_with_the_real_pre_commit(repo):
    pre_commit = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                    os.environ["PATH"]]))
    if pre_commit is None:
        pytest.skip("pre-commit is a test extra: pip install -e '.[test]'")
    hooks = repo.parent / "hooks"  # this repository as pre-commit sees it: a git repository of its own
    shutil.copytree(REPO, hooks, ignore=shutil.ignore_patterns(".venv", "build", "__pycache__", "*.egg-info",
                                                                ".pytest_cache", "golden"))
    git("init", "-q", "-b", "main", cwd=hooks)
    git("add", "-A", cwd=hooks)
    git("commit", "-q", "-m", "hooks", cwd=hooks)
    env = dict(os.environ, PRE_COMMIT_HOME=str(repo.parent / "pre-commit-cache"))
    config = repo / ".pre-commit-config.yaml"
    rev = git("rev-parse", "HEAD", cwd=hooks).strip()
    config.write_text(f"repos:\n  - repo: {hooks}\n    rev: {rev}\n    hooks:\n"
                      "      - id: trainspec-validate\n      - id: trainspec-check\n")
    git("add", "-A", cwd=repo)
    good = subprocess.run([pre_commit, "run", "--all-files"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)
    assert good.returncode == 0, good.stdout + good.stderr
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 0\n")
    git("add", "-A", cwd=repo)
    bad = subprocess.run([pre_commit, "run", "--all-files"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 1
    assert "specs/single-node.yaml:10:10: error: resources.nodes: expected greater than or equal to 1" in bad.stdout
