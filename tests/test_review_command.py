"""`trainspec review --git BASE` (issue 30): the whole pull-request comment in one command -- the
cost summary, the plan and the diff, what `plan --git` then `diff --git` print (the example
workflow's former `plan`, `echo`, `diff`), byte for byte unless the comment is full, when the
two share its room -- compiling each revision once. Real git
histories, like test_review_git.py."""

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from conftest import edit, git, spec_repo, ts
from test_said_once import NEW_IMAGE, OLD_IMAGE, TEAM, team_repo

GITHUB_LIMIT = 65_536  # GitHub refuses a longer comment


@pytest.fixture
def change(tmp_path):
    """The said-once repository (three unrelated specs, 18 jobs on one base) and a branch that
    bumps the base's image, doubles one job's nodes, removes one job and adds one."""
    repo = team_repo(tmp_path)
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")
    os.remove(repo / "specs" / "hpcpack-ddp.yaml")
    (repo / "specs" / "team-new.yaml").write_text(
        "extends: ../bases/gpu.yaml\nname: team-new\ncode: ../examples/ddp\ncommand: python train.py\n")
    commit(repo, "bump the base image; single-node on two nodes; hpcpack-ddp gone; team-new")
    return repo


def commit(repo, message):
    ts("compile", "specs/", "-o", "build/", "--prune", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


def workflow_comment(repo, fmt, base="HEAD~1"):
    """What the example workflow posted before review: plan, a blank line (echo), diff."""
    plan = ts("plan", "--git", base, "specs/", "--format", fmt, cwd=repo, check=True).stdout
    diff = ts("diff", "--git", base, "specs/", "--format", fmt, cwd=repo, check=True).stdout
    return plan + "\n" + diff


def test_review_in_text_is_plan_then_diff_byte_for_byte(change):
    proc = ts("review", "--git", "HEAD~1", "specs/", "--format", "text", cwd=change)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == workflow_comment(change, "text")


def test_a_comment_that_needs_no_cut_is_plan_then_diff_byte_for_byte(tmp_path):
    repo = spec_repo(tmp_path)
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")
    proc = ts("review", "--git", "HEAD", "specs/", cwd=repo)  # markdown: review's default, the comment
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Cut to fit" not in proc.stdout and "cut to " not in proc.stdout
    assert proc.stdout == workflow_comment(repo, "markdown", "HEAD")


def test_the_plan_uses_the_room_the_diff_leaves(change):
    """The base bump of 18 jobs is one short change in the diff, and in the plan what the 18 jobs
    share is said once (issue 42): `plan --git` alone keeps to its 24,000 characters without
    cutting a plan (before, it cut the last plans to their headings), and the comment is the two
    whole documents."""
    cut = "(the rest of this job's plan is in the full plan)"
    plan_alone = ts("plan", "--git", "HEAD~1", "specs/", "--format", "markdown", cwd=change, check=True).stdout
    assert cut not in plan_alone and "## Said once for " in plan_alone
    whole_plan = ts("plan", "--git", "HEAD~1", "specs/", "--format", "markdown", "--max-chars", "0",
                    cwd=change, check=True).stdout
    diff = ts("diff", "--git", "HEAD~1", "specs/", "--format", "markdown", cwd=change, check=True).stdout
    text = ts("review", "--git", "HEAD~1", "specs/", cwd=change, check=True).stdout
    assert cut not in text and "Cut to fit" not in text
    # nothing cut, so the two whole documents, but that under the summary, which says the new image
    # of the 18 jobs, the diff's change A names the field only
    full = f"**environment.image {OLD_IMAGE} → {NEW_IMAGE} (in bases/gpu.yaml)**"
    said = "**environment.image → its new value, said above (in bases/gpu.yaml)**"
    assert diff.count(full) == 1 and full not in text
    assert text == whole_plan + "\n" + diff.replace(full, said)
    assert len(text) < 60_000 < GITHUB_LIMIT


def test_the_comment_opens_with_the_cost_then_the_plan_then_the_diff(change):
    text = ts("review", "--git", "HEAD~1", "specs/", cwd=change, check=True).stdout
    cost = text.index("**Cost: GPUs of all jobs: ")
    first_plan = text.index("\n## ")
    diff = text.index("\n# trainspec diff since HEAD\\~1: 21 jobs changed\n")
    assert text.startswith("# trainspec plan: 20 jobs changed since HEAD\\~1\n\n") and cost < first_plan < diff
    assert "- `single-node`: nodes `1` → `2`; GPUs `2` → `4`" in text[cost:first_plan]
    assert "- `hpcpack-ddp`: removed job" in text[cost:first_plan]
    assert "- `team-new`: new job" in text[cost:first_plan]
    # the base bump, said once in the diff, with its 18 jobs
    assert text[diff:].count("## Change A: the same in 18 jobs\n") == 1
    assert all(f"`{name}`" in text[diff:] for name in TEAM)


def test_json_is_one_document_with_plans_and_diffs_values(change):
    data = json.loads(ts("review", "--git", "HEAD~1", "specs/", "--format", "json", cwd=change, check=True).stdout)
    assert sorted(data) == ["base", "cost", "diff", "plan"] and data["base"] == "HEAD~1"
    plan = json.loads(ts("plan", "--git", "HEAD~1", "specs/", "--format", "json", cwd=change, check=True).stdout)
    diff = json.loads(ts("diff", "--git", "HEAD~1", "specs/", "--format", "json", cwd=change, check=True).stdout)
    assert data["cost"] == plan["cost"] and data["cost"]["gpus_after"] - data["cost"]["gpus_before"] == 16 + 2 - 8
    assert data["plan"] == {"jobs": plan["jobs"], "removed": plan["removed"]}
    assert data["diff"] == {"shared": diff["shared"], "jobs": diff["jobs"]}
    assert data["diff"]["shared"][0]["jobs"] == TEAM


def test_a_big_change_fits_one_comment_and_keeps_every_cost_row(tmp_path):
    repo = spec_repo(tmp_path)
    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"job-{i:03d}" for i in range(150)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "150 jobs", cwd=repo)
    noise = "".join(f"  VAR_{k:03d}: value-{k:03d}\n" for k in range(40))  # volume in every job's diff
    for i, name in enumerate(names):
        nodes = 2 if i % 5 == 0 else 1
        text = template.replace("single-node", name).replace("  nodes: 1\n", f"  nodes: {nodes}\n")
        (repo / "specs" / f"{name}.yaml").write_text(text + f"env:\n{noise}")
    text = ts("review", "--git", "HEAD", "specs/", cwd=repo, check=True).stdout
    assert len(text) < 60_000 < GITHUB_LIMIT, len(text)
    assert "Cut to fit one comment" in text
    summary = text.split("\n## ", 1)[0]
    # the same cost change of 30 jobs: one row naming each of them (issue 42: said once)
    bigger = [name for i, name in enumerate(names) if i % 5 == 0]
    assert f"- **30 jobs** ({', '.join(f'`{n}`' for n in bigger)}): nodes `1` → `2`; GPUs `2` → `4`\n" in summary
    # the plan and the diff share the comment: together they hold at least what each keeps alone
    alone = workflow_comment(repo, "markdown", "HEAD")
    plan_cut = "(the rest of this job's plan is in the full plan)"
    assert text.count(plan_cut) <= alone.count(plan_cut) and len(alone) <= len(text)


def run_in_process(repo, monkeypatch, capsys, *argv):
    """`trainspec *argv` in this process (so a test can count what it does): (exit code, stdout, stderr)."""
    from trainspec.cli import main

    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_each_revision_is_compiled_once(change, monkeypatch, capsys):
    """Every spec of each side is built at most once (review/revision.py's build, counted by the
    tree it runs in and the file), where plan and diff each built both sides."""
    from trainspec.review import revision

    built = Counter()
    real_build = revision.build

    def counting(file, *args, **kwargs):
        built[(os.getcwd(), file)] += 1
        return real_build(file, *args, **kwargs)

    monkeypatch.setattr(revision, "build", counting)
    code, out, _ = run_in_process(change, monkeypatch, capsys, "review", "--git", "HEAD~1", "specs/")
    assert code == 0 and out.startswith("# trainspec plan: 20 jobs changed")
    assert built and max(built.values()) == 1, built.most_common(3)
    head = {f for (tree, f) in built if Path(tree) == change}
    assert len(head) == 21  # every spec of the working tree: 3 + 18, team-new in, hpcpack-ddp out
    # at the base, only the specs whose inputs differ there: the 18 on the bumped base, the one
    # edited, the one removed; mnist-lightning is the working tree's outcome again
    base = {f for (tree, f) in built if Path(tree) != change}
    assert base == {f"specs/{n}.yaml" for n in [*TEAM, "single-node", "hpcpack-ddp"]}, sorted(base)
    once = sum(built.values())
    built.clear()
    for command in ("plan", "diff"):
        assert run_in_process(change, monkeypatch, capsys, command, "--git", "HEAD~1", "specs/",
                              "--format", "markdown")[0] == 0
    assert sum(built.values()) == 2 * once  # what review saves: the second compile of both sides


@pytest.mark.parametrize("base", ["no-such-branch", "HEAD~99", "-x", "HEAD..main", "main:specs"])
def test_a_bad_base_is_one_line_and_exit_2(change, base):
    proc = ts("review", f"--git={base}", "specs/", cwd=change)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"trainspec review: error: --git {base}: not a revision of the repository at ")


def test_outside_a_repository_is_one_line_and_exit_2(tmp_path):
    proc = ts("review", "--git", "main", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("trainspec review: error: --git needs a git repository")


def test_review_needs_a_base():
    proc = ts("review")
    assert proc.returncode == 2 and "the following arguments are required: --git" in proc.stderr


def test_links_that_leave_the_repository_are_never_followed(change, tmp_path):
    """A conda file that became a link out of the repository is an error at its field, never read;
    a committed output replaced by a link is named, never read; nothing of either reaches the
    comment or the log."""
    secret = tmp_path / "outside.yml"
    secret.write_text("SECRET_FROM_OUTSIDE: hunter2\n")
    job = change / "build" / "team-01" / "azureml" / "job.yml"
    job.unlink()
    os.symlink("/proc/self/environ", job)
    proc = ts("review", "--git", "HEAD~1", "specs/", cwd=change, env={**os.environ, "SECRET_TOKEN": "hunter2"})
    assert proc.returncode == 0, proc.stderr
    assert "build/team-01/azureml/job.yml" in proc.stdout and "hunter2" not in proc.stdout + proc.stderr
    (change / "envs").mkdir()
    os.symlink(str(secret), change / "envs" / "team.yml")
    edit(change / "specs" / "team-01.yaml", "command:", "environment: {conda_file: ../envs/team.yml}\ncommand:")
    proc = ts("review", "--git", "HEAD~1", "specs/", cwd=change, env={**os.environ, "SECRET_TOKEN": "hunter2"})
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert "specs/team-01.yaml" in proc.stderr and "environment.conda_file" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_change_only_inside_a_shipped_code_folder_is_compiled_at_the_base_too(tmp_path):
    """The Kubernetes job embeds its code folder in a ConfigMap: a spec whose own bytes are the
    same at the base but whose code folder changed is compiled there too, and its job's diff
    shows the ConfigMap's change."""
    from test_untrusted_paths import k8s_repo

    root = k8s_repo(tmp_path)
    with open(root / "code" / "train.py", "a") as fh:
        fh.write("# a change in the code the ConfigMap carries\n")
    data = json.loads(ts("review", "--git", "HEAD", "--format", "json", cwd=root, check=True).stdout)
    job, = data["diff"]["jobs"]
    assert job["name"] == "k8s-ddp" and job["code_changed"] == ["code/train.py"]
    assert any(f["path"] == "build/k8s-ddp/kubernetes/job.yaml" and "a change in the code" in f["diff"]
               for f in job["files"]), job["files"]
