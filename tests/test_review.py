"""The GitOps loop on real files in temporary git repositories: check as the CI gate, plan and
diff for reviewers, the pre-commit hooks through the real pre-commit, and the CI example."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, edit, git, run, spec_repo, trainspec_cmd, ts

@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def check(repo):
    return ts("check", "specs/", "--out", "build/", cwd=repo)


def follow_advice(proc, cwd):
    """Run every `fix:` command check printed, as the user would type it."""
    fixes = [line.split("fix: ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("  fix: ")]
    assert fixes, proc.stdout
    for command in dict.fromkeys(fixes):
        words = shlex.split(command)
        if words[0] == "trainspec":
            words = [*trainspec_cmd(), *words[1:]]
        run(words, cwd, check=True)
    return fixes


def test_check_says_what_each_finding_is_and_its_advice_fixes_it(repo):
    assert check(repo).returncode == 0
    edit(repo / "build" / "mnist-lightning" / "azureml" / "job.yml", "instance_count: 2", "instance_count: 3")
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 1\n  shm_size: 8g\n")  # not recompiled
    (repo / "build" / "hpcpack-ddp" / "hpcpack" / "stage.sh").unlink()
    git("mv", "specs/mnist-lightning.yaml", "specs/mnist.yaml", cwd=repo)  # renamed, name unchanged
    (repo / "build" / "notes").mkdir()
    (repo / "build" / "notes" / "README.md").write_text("not trainspec's\n")
    (repo / "build" / "single-node" / "azureml" / "extra.txt").write_text("added by hand\n")
    proc = check(repo)
    assert proc.returncode == 1
    out = proc.stdout
    assert "build/single-node/azureml/job.yml: stale: its spec changed since it was compiled (spec sha256:" in out
    assert "build/single-node/azureml/extra.txt: stale: its spec no longer produces it" in out
    assert "build/hpcpack-ddp/hpcpack/stage.sh: missing: its spec produces it" in out
    assert "build/notes: foreign: not written by trainspec" in out
    assert "  fix: trainspec compile specs/single-node.yaml -o build/\n" in out
    assert "  fix: rm -r -- build/notes\n" in out
    assert "+  shm_size: 8g" in out  # the stale file's diff
    assert "build/mnist-lightning/azureml/job.yml: stale: its spec moved from specs/mnist-lightning.yaml to " \
           "specs/mnist.yaml" in out
    assert re.search(r"trainspec check: \d+ problem\(s\) in build/ \(\d+ stale, 1 missing, 1 foreign\); to fix "
                     r"them all, run:", proc.stderr), proc.stderr
    follow_advice(proc, repo)
    after = check(repo)
    assert after.returncode == 0, after.stdout + after.stderr


def test_check_tells_hand_edits_from_stale_outputs_and_orphans_from_renames(repo):
    edit(repo / "build" / "mnist-lightning" / "azureml" / "job.yml", "instance_count: 2", "instance_count: 3")
    git("mv", "specs/hpcpack-ddp.yaml", "specs/renamed.yaml", cwd=repo)
    edit(repo / "specs" / "renamed.yaml", "name: hpcpack-ddp", "name: renamed")
    proc = check(repo)
    assert proc.returncode == 1
    assert "build/mnist-lightning/azureml/job.yml: hand-edited: changed since trainspec wrote it (its spec did " \
           "not change)" in proc.stdout
    assert "-  instance_count: 3\n+  instance_count: 2" in proc.stdout
    assert "build/hpcpack-ddp/hpcpack: orphaned: written from specs/hpcpack-ddp.yaml, which is gone" in proc.stdout
    assert "  fix: trainspec compile specs/ -o build/ --prune\n" in proc.stdout
    assert "build/renamed/hpcpack/job.xml: missing" in proc.stdout
    fixes = set(follow_advice(proc, repo))
    assert len(fixes) == 3  # hand-edited job, the renamed spec's outputs, the orphan
    assert not (repo / "build" / "hpcpack-ddp").exists()
    assert check(repo).returncode == 0


def test_prune_removes_only_what_trainspec_wrote_for_specs_that_are_gone(repo):
    foreign = repo / "build" / "keep-me"
    foreign.mkdir()
    (foreign / "job.yml").write_text("# my own job, no trainspec header\n")
    (repo / "specs" / "single-node.yaml").unlink()
    # compiling one other spec with --prune: the gone spec's outputs go; hpcpack-ddp's stay (its spec
    # exists, it is just not part of this run); the folder without a header stays
    proc = ts("compile", "specs/mnist-lightning.yaml", "-o", "build/", "--prune", cwd=repo, check=True)
    assert "removed build/single-node/azureml/ (written from specs/single-node.yaml" in proc.stdout
    assert not (repo / "build" / "single-node").exists()
    assert (repo / "build" / "hpcpack-ddp" / "hpcpack" / "job.xml").exists()
    assert (foreign / "job.yml").exists()


def test_diff_git_compiles_the_base_where_the_working_tree_is(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "  nodes: 2\n", "  nodes: 4\n")
    edit(spec, "sku: Standard_ND96isr_H100_v5", "sku: Standard_ND96amsr_A100_v4")
    git("commit", "-q", "-am", "bigger", cwd=repo)
    proc = ts("diff", "--git", "HEAD~1", "--out", "../build", cwd=repo / "specs")  # from a sub-folder
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "== mnist-lightning (specs/mnist-lightning.yaml)"
    # the job runs on the Azure ML cluster gpu-cluster, which no team catalog maps to a size: the
    # new sku changes no hardware there, and the diff says so instead of announcing "GPU H100 → A100"
    assert lines[1] == ("resources.nodes 2 → 4; resources.sku Standard_ND96isr_H100_v5 → Standard_ND96amsr_A100_v4 "
                        "(sku not enforced on azureml: the compute cluster gpu-cluster decides the hardware); "
                        "world 16 → 32")
    assert "--- a/build/mnist-lightning/azureml/job.yml\n+++ b/build/mnist-lightning/azureml/job.yml" in proc.stdout
    assert "-  instance_count: 2\n+  instance_count: 4" in proc.stdout
    assert "code:" not in "".join(l for l in lines if l.startswith(("-", "+")))  # the same relative paths
    assert "trainspec-" not in proc.stdout + proc.stderr and str(repo.parent) not in proc.stdout + proc.stderr
    assert "single-node" not in proc.stdout  # unchanged jobs are not listed
    md = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo)
    assert md.stdout.startswith("# trainspec diff since HEAD\\~1: 1 job changed\n")
    assert "**resources.nodes 2 → 4;" in md.stdout and "```diff" in md.stdout


def test_a_base_revision_that_does_not_compile_still_gets_a_review_naming_its_errors(repo):
    spec = repo / "specs" / "single-node.yaml"
    edit(spec, "  nodes: 1\n", "  nodes: 0\n")
    git("commit", "-q", "-am", "broken", cwd=repo)
    edit(spec, "  nodes: 0\n", "  nodes: 1\n")  # the pull request that fixes it
    located = "HEAD:specs/single-node.yaml:10:10: error: resources.nodes: expected greater than or equal to 1"
    proc = ts("diff", "--git", "HEAD", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "== single-node (specs/single-node.yaml)"
    assert lines[1].startswith("the spec did not compile at the base revision (1 error(s): " + located)
    assert "+++ b/build/single-node/azureml/job.yml" in proc.stdout  # the whole job, new to the reviewer
    assert "HEAD:specs/single-node.yaml:10:10: note: (at the base revision) resources.nodes" in proc.stderr
    plan = json.loads(ts("plan", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    assert [j["name"] for j in plan["jobs"]] == ["single-node"]  # submitted: it could not have been before
    assert "trainspec-" not in proc.stderr and "/tmp" not in proc.stderr and "Traceback" not in proc.stderr
    # the change itself must compile: an error on the working tree's side fails the review
    edit(spec, "  nodes: 1\n", "  nodes: -1\n")
    broken = ts("diff", "--git", "HEAD", cwd=repo)
    assert broken.returncode == 1 and "specs/single-node.yaml:10:10: error: resources.nodes" in broken.stderr


BASE = """version: 1
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04
  conda_file: ../examples/ddp/environment.yml
env: {NCCL_DEBUG: WARN}
targets:
  azureml: {compute: gpu-cluster, timeout: 2d}
"""


def child(name):
    return f"extends: ../bases/gpu.yaml\nname: {name}\ncode: ../examples/ddp\ncommand: python train.py\nframework: pytorch\n"


def test_diff_git_lists_every_job_a_shared_file_changes(repo):
    (repo / "bases").mkdir()
    (repo / "bases" / "gpu.yaml").write_text(BASE)
    (repo / "specs" / "job-a.yaml").write_text(child("job-a"))
    (repo / "specs" / "job-b.yaml").write_text(child("job-b"))
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "two jobs on one base", cwd=repo)
    edit(repo / "bases" / "gpu.yaml", "nodes: 2", "nodes: 3")
    edit(repo / "bases" / "gpu.yaml", "NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO")
    edit(repo / "bases" / "gpu.yaml", "timeout: 2d", "timeout: 3d")
    proc = ts("diff", "--git", "HEAD", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    heads = [line for line in proc.stdout.splitlines() if line.startswith("== ")]
    # the base is not a job; the change it makes, the same in both jobs, is said once, then each job points to it
    assert heads == ["== change A: the same in 2 jobs", "== job-a (specs/job-a.yaml)", "== job-b (specs/job-b.yaml)"]
    summary = ("resources.nodes 2 → 3 (in bases/gpu.yaml); targets.azureml.timeout 2d → 3d (in bases/gpu.yaml); "
               "world 16 → 24; env.NCCL_DEBUG WARN → INFO (in bases/gpu.yaml)")  # why: the base; cost first
    assert proc.stdout.count(summary + "\n") == 1
    assert proc.stdout.count("\nchange A (above) and nothing else") == 2
    # a conda file the jobs read: both jobs change, and the summary says which output
    git("checkout", "-q", "--", "bases", cwd=repo)
    with open(repo / "examples" / "ddp" / "environment.yml", "a") as fh:
        fh.write("# pinned differently\n")
    conda = ts("diff", "--git", "HEAD", "--format", "json", cwd=repo)
    jobs = json.loads(conda.stdout)["jobs"]
    assert [j["name"] for j in jobs] == ["hpcpack-ddp", "job-a", "job-b"]
    assert jobs[1]["changes"] == [] and jobs[1]["files"] == []  # job.yml references the file; it is uploaded at submit
    assert jobs[1]["summary"] == "no spec field changed; the job reads changed files: examples/ddp/environment.yml"
    assert [j["shared"] for j in jobs] == [None, "A", "A"]  # the same change in both: said once
    # the HPC Pack job does not read it as its environment, but it is in the code folder that job ships
    assert jobs[0]["summary"] == ("no spec field changed; the code folder it uploads changed "
                                  "(1 file: examples/ddp/environment.yml)")


def test_diff_git_new_and_removed_jobs(repo):
    (repo / "specs" / "single-node.yaml").rename(repo / "specs" / "one-node.yaml")
    edit(repo / "specs" / "one-node.yaml", "name: single-node", "name: one-node")
    proc = ts("diff", "--git", "HEAD", "--format", "json", cwd=repo)
    jobs = {j["name"]: j for j in json.loads(proc.stdout)["jobs"]}
    assert set(jobs) == {"one-node", "single-node"}
    assert jobs["one-node"]["summary"] == ("new job: world 2 = 1 node(s) x 2 process(es) on Standard_NC48ads_A100_v4, "
                                           "targets azureml")
    assert jobs["single-node"]["status"] == "removed" and jobs["single-node"]["summary"].startswith("removed job: ")
    text = ts("diff", "--git", "HEAD", cwd=repo).stdout
    assert "--- /dev/null\n+++ b/build/one-node/azureml/job.yml" in text
    assert "--- a/build/single-node/azureml/job.yml\n+++ /dev/null" in text


def test_diff_two_files_and_one_spec_with_overrides(tmp_path):
    base = REPO / "specs" / "single-node.yaml"
    head = tmp_path / "single-node.yaml"
    head.write_text(base.read_text().replace("../examples/", f"{REPO}/examples/")
                    .replace("  gpus_per_node: 2\n", "  gpus_per_node: 1\n"))
    proc = ts("diff", str(base), str(head), cwd=REPO)
    assert "\nresources.gpus_per_node 2 → 1; world 2 → 1; code ../examples/mnist → " in proc.stdout  # cost first
    # one process: per-process (the default for a job of one process), where two ran per node
    assert "; processes per node 2 → 1; launcher (azureml) per-node → per-process\n" in proc.stdout
    proc = ts("diff", "specs/mnist-lightning.yaml", "--set", "resources.nodes=3", "--set", "env.NCCL_DEBUG=INFO",
              cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == ("resources.nodes 2 → 3 (by --set); world 16 → 24; "
                                           "env.NCCL_DEBUG WARN → INFO (by --set)")  # what costs first
    usage = ts("diff", "specs/mnist-lightning.yaml", cwd=REPO)
    assert usage.returncode == 2 and "one SPEC with --set/--var" in usage.stderr


def test_plan_for_terminal_pr_comment_and_tools(repo):
    text = ts("plan", "specs/mnist-lightning.yaml", cwd=repo, check=True).stdout
    assert "azureml: world 16 = 2 node(s) x 8 process(es), launcher per-process" in text
    last = next(line for line in text.splitlines() if "rank 15 (last):" in line)
    assert " NODE_RANK=1 " in last and " RANK=15 " in last and " LOCAL_RANK=7 " in last
    md = ts("plan", "specs/mnist-lightning.yaml", "--format", "markdown", cwd=repo, check=True).stdout
    assert md.startswith("# trainspec plan: 1 job\n\n## mnist-lightning (specs/mnist-lightning.yaml)")
    assert "| sku | `Standard_ND96isr_H100_v5` |" in md
    data = json.loads(ts("plan", "specs/hpcpack-ddp.yaml", "--format", "json", cwd=repo, check=True).stdout)
    target = data["jobs"][0]["targets"][0]
    assert target["target"] == "hpcpack" and target["world_size"] == 8 and target["launcher"] == "per-node"
    assert target["ranks"]["first"]["MASTER_PORT"] == "29400"
    assert target["submit"].startswith("job submit /jobfile:build/hpcpack-ddp/hpcpack/job.xml  (after: bash ")


def test_plan_over_a_folder_and_over_what_a_branch_changes(repo):
    everything = json.loads(ts("plan", "specs/", "--format", "json", cwd=repo, check=True).stdout)
    assert sorted(j["name"] for j in everything["jobs"]) == ["hpcpack-ddp", "mnist-lightning", "single-node"]
    git("checkout", "-q", "-b", "bigger", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    git("rm", "-q", "specs/single-node.yaml", cwd=repo)
    git("commit", "-q", "-am", "bigger, and one job fewer", cwd=repo)
    md = ts("plan", "--git", "main", "--format", "markdown", cwd=repo, check=True).stdout
    # the cost summary first (never cut), then each job's plan
    # what merging launches first (every target of every job the plan lists; the removed one: none),
    # then the cost summary (never cut), then each job's plan
    assert md.startswith("# trainspec plan: 1 job changed since main\n\n**Merging this launches 1 job** (1 on azureml)\n\n"
                         "**Cost: GPUs of all jobs: 26 → 40 (\\+14); "
                         "2 jobs with cost changes**\n\n| job | target | GPUs | price per hour |")
    # the cost table (tests/test_prices.py), then what changes job by job
    # what changes in how many jobs (issue 42), then job by job
    assert "\n\n**What changes:** resources.nodes, world in 1 job; 1 job removed.\n\n" in md.split("\n## ")[0]
    assert ("\n\n- `mnist-lightning`: nodes `2` → `4`; GPUs `16` → `32`\n"
            "- `single-node`: removed job, GPUs `2` → `0`: ") in md.split("\n## ")[0]
    assert "\n\n## mnist-lightning" in md
    assert "world 32 = 4 node(s) x 8 process(es)" in md and "hpcpack-ddp" not in md
    assert "## removed jobs\n- single-node (specs/single-node.yaml)" in md
    data = json.loads(ts("plan", "--git", "main", "--format", "json", cwd=repo, check=True).stdout)
    assert [j["name"] for j in data["jobs"]] == ["mnist-lightning"] and data["base"] == "main"
    assert data["removed"] == [{"name": "single-node", "spec": "specs/single-node.yaml"}]


def test_compile_prints_the_submit_command(repo):
    proc = ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    assert "submit: az ml job create --file build/mnist-lightning/azureml/job.yml" in proc.stdout
    assert "submit: job submit /jobfile:build/hpcpack-ddp/hpcpack/job.xml" in proc.stdout


def pre_commit_tool():
    found = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert found, "pre-commit is a test extra: pip install -e '.[test]'"
    return found


def readme_blocks():
    """(info string, text) of every fenced block of the GitOps page (docs/gitops.md, once the README's
    GitOps section), dedented as a user copies it."""
    import textwrap

    found = re.findall(r"^( *)```(\w*)\n(.*?)^\1```", (REPO / "docs" / "gitops.md").read_text(), re.S | re.M)
    return [(info, textwrap.dedent(body)) for _, info, body in found]


def readme_block(marker: str) -> str:
    """The fenced block of the GitOps page that contains ``marker``."""
    found = [body for _, body in readme_blocks() if marker in body]
    assert len(found) == 1, marker
    return found[0]


def pre_commit(repo, tmp_path):
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-cache"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return subprocess.run([pre_commit_tool(), "run", "--all-files"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


def test_readme_pre_commit_snippet_works_as_written(repo, tmp_path):
    (repo / ".pre-commit-config.yaml").write_text(readme_block("repo: local"))
    git("add", "-A", cwd=repo)
    good = pre_commit(repo, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "trainspec validate" in good.stdout and "trainspec check" in good.stdout
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 0\n")
    git("add", "-A", cwd=repo)
    bad = pre_commit(repo, tmp_path)
    assert bad.returncode == 1
    assert "specs/single-node.yaml:10:10: error: resources.nodes: expected greater than or equal to 1" in bad.stdout
    edit(repo / "specs" / "single-node.yaml", "  nodes: 0\n", "  nodes: 1\n  shm_size: 8g\n")  # valid, not compiled
    git("add", "-A", cwd=repo)
    stale = pre_commit(repo, tmp_path)
    assert stale.returncode == 1 and "build/single-node/azureml/job.yml: stale" in stale.stdout


def test_shipped_pre_commit_hooks_with_the_real_pre_commit(repo, tmp_path):
    """.pre-commit-hooks.yaml, used as `repo: <trainspec's repository>` (pre-commit installs trainspec)."""
    hooks = repo.parent / "hooks"  # this repository as pre-commit sees it: a git repository of its own
    shutil.copytree(REPO, hooks, ignore=shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", "*.egg-info",
                                                                ".pytest_cache", "golden", "results"))
    git("init", "-q", "-b", "main", cwd=hooks)
    git("add", "-A", cwd=hooks)
    git("commit", "-q", "-m", "hooks", cwd=hooks)
    rev = git("rev-parse", "HEAD", cwd=hooks).strip()
    (repo / ".pre-commit-config.yaml").write_text(f"repos:\n  - repo: {hooks}\n    rev: {rev}\n    hooks:\n"
                                                  "      - id: trainspec-validate\n      - id: trainspec-check\n")
    git("add", "-A", cwd=repo)
    good = pre_commit(repo, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 0\n")
    git("add", "-A", cwd=repo)
    bad = pre_commit(repo, tmp_path)
    assert bad.returncode == 1
    assert "specs/single-node.yaml:10:10: error: resources.nodes: expected greater than or equal to 1" in bad.stdout


def readme_console(command: str) -> str:
    """What the GitOps page shows a command printing (its ```console block starting `$ command`)."""
    found = [body.split("\n", 1)[1] for info, body in readme_blocks()
             if info == "console" and body.startswith(f"$ {command}\n")]
    assert len(found) == 1, command
    return found[0]


def test_readme_gitops_section_shows_real_output(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "timeout: 2d", "timeout: 3d")
    edit(spec, "NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO")
    for command in ("trainspec diff --git main", "trainspec plan --git main"):
        proc = ts(*shlex.split(command)[1:], cwd=repo, check=True)
        assert proc.stdout == readme_console(command)
    git("checkout", "-q", "HEAD", "--", ".", cwd=repo)
    edit(repo / "build" / "mnist-lightning" / "azureml" / "job.yml", "instance_count: 2", "instance_count: 3")
    git("rm", "-q", "specs/single-node.yaml", cwd=repo)
    (repo / "build" / "notes").mkdir()
    (repo / "build" / "notes" / "todo.md").write_text("hi\n")
    proc = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert proc.stdout + proc.stderr == readme_console("trainspec check specs/ --out build/")


@pytest.mark.parametrize("spec, last", [("mnist-lightning.yaml", "rank 15"), ("ddp-torchrun.yaml", "node 1 launcher")])
def test_plan_shows_what_the_shim_exports(tmp_path, spec, last):
    """plan and the shim share one answer (issue 12): the last process's variables in `plan --format
    json` are those the real shim prints (--print) in that process of the compiled job, as Azure ML
    starts it (local.py's emulation of the platform)."""
    import json
    import subprocess
    import sys

    from ruamel.yaml import YAML

    from trainspec.targets.azureml.local import platform_processes
    from trainspec.local.netns import Loopback

    plan = json.loads(ts("plan", f"specs/{spec}", "--format", "json", cwd=REPO).stdout)["jobs"][0]
    shown = plan["targets"][0]["ranks"]["last"]
    ts("compile", f"specs/{spec}", "-o", str(tmp_path), cwd=REPO)
    folder = next(tmp_path.glob("*/azureml"))
    job = YAML(typ="safe").load((folder / "job.yml").read_text())
    procs = platform_processes(job, "true", cwd=str(tmp_path), base_env={"PATH": "/usr/bin:/bin"}, hosts=Loopback())
    env = procs[-1].env
    printed = subprocess.run([sys.executable, "-I", "-S", str(folder / "trainspec_shim.py"), "--print"],
                             env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    exported = dict(line.split("=", 1) for line in printed.splitlines())
    exported = {k: v.replace(env["MASTER_ADDR"], "<address of node 0>") for k, v in exported.items()}
    assert {k: v for k, v in shown.items() if k in exported} == exported
    assert f"  {last} (last): " in ts("plan", f"specs/{spec}", cwd=REPO).stdout


def test_the_specs_timeout_opens_the_cost_summary(repo):
    """The top-level timeout decides what a job costs on every target: a change to it is a cost
    change, named first in the summary and in the job's one-line diff."""
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "    timeout: 2d\n", "")  # Azure ML's own limit, which would override the spec's
    edit(spec, "\nname: mnist-lightning\n", "\nname: mnist-lightning\ntimeout: 24h\n")
    git("commit", "-q", "-am", "a day at most, said once", cwd=repo)
    edit(spec, "timeout: 24h", "timeout: 2d")
    edit(spec, "  nodes: 2\n", "  nodes: 4\n")
    md = ts("plan", "--git", "HEAD", "--format", "markdown", cwd=repo, check=True).stdout
    assert md.startswith("# trainspec plan: 1 job changed since HEAD\n\n**Merging this launches 1 job** (1 on azureml)\n\n"
                         "**Cost: GPUs of all jobs: 26 → 42 (\\+16); "
                         "1 job with cost changes**\n\n| job | target |"), md[:400]
    assert ("\n\n- `mnist-lightning`: timeout `24h` → `2d`; nodes `2` → `4`; GPUs `16` → `32`\n"
            in md.split("\n## ")[0]), md[:2000]
    data = json.loads(ts("plan", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    assert data["cost"]["jobs"][0]["changes"][0] == {"field": "timeout", "before": "24h", "after": "2d"}
    diff = json.loads(ts("diff", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    assert diff["jobs"][0]["summary"].startswith("timeout 24h → 2d; resources.nodes 2 → 4")  # cost first
    # a job that only gains a time limit: still a cost change, and what plan says the target enforces
    git("checkout", "-q", "--", "specs", cwd=repo)
    edit(spec, "timeout: 24h", "timeout: 90m")
    text = ts("plan", "--git", "HEAD", cwd=repo, check=True).stdout
    assert "mnist-lightning: timeout 24h → 90m\n" in text
    assert "  time limit: 1h30m (limits.timeout: 5400), from the spec's timeout\n" in text
    # the target's own limit overrides the spec's there, and plan says which one Azure ML enforces
    edit(spec, "    job_tier: standard\n", "    job_tier: standard\n    timeout: 12h\n")
    text = ts("plan", "specs/mnist-lightning.yaml", cwd=repo, check=True).stdout
    assert "  time limit: 12h (limits.timeout: 43200), from targets.azureml.timeout\n" in text
