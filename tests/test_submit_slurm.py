"""`trainspec submit/status/logs/cancel -t slurm` (targets/slurm/submit.py): Slurm's words in the
common ones (tables, no cluster), then the commands themselves on a real Slurm cluster
(tests/slurm_cluster.py: slurmctld and two slurmd in network namespaces), run the way a user runs
them on a login node: inside the controller's namespace, from the folder the spec is in.

Slurm's time limit counts in minutes, so a job that ends TIMEOUT takes over a minute here: the
state's mapping is shown by the table, not by a job."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_examples, example_specs, sigint_default, trainspec_cmd
from slurm_cluster import GPUS_PER_NODE, H100_NODE, SlurmCluster, missing

from trainspec.jobs.api import State
from trainspec.targets.slurm.submit import expand, fields, label, refusal, status_of

BOUND = 120  # s: the longest any command here may take (every job is seconds long)

HELLO = """import os, sys
print("hello from rank", os.environ["RANK"], "on node", os.environ["NODE_RANK"], flush=True)
print("to stderr from rank", os.environ["RANK"], file=sys.stderr, flush=True)
sys.exit(int(os.environ.get("FAIL", "0")) if os.environ["RANK"] == "0" else 0)  # FAIL: rank 0, after printing
"""
RELINK = """import glob, os
print("before the link", flush=True)
if os.environ["RANK"] == "0":  # the job owns its output file: it makes it a link to whoever reads it
    [out] = glob.glob(os.path.join(os.environ["SLURM_SUBMIT_DIR"], "*-" + os.environ["SLURM_JOB_ID"] + ".out"))
    os.remove(out)
    os.symlink("/proc/self/environ", out)
"""
SLEEPER = """import os, time
print("sleeping rank", os.environ["RANK"], flush=True)
time.sleep(float(os.environ.get("SLEEP", "60")))
"""


# --- Slurm's words (no cluster) -------------------------------------------------------------------

@pytest.mark.parametrize("word, state", [
    ("PENDING", State.QUEUED), ("CONFIGURING", State.QUEUED), ("REQUEUED", State.QUEUED),
    ("RESV_DEL_HOLD", State.QUEUED), ("RUNNING", State.RUNNING), ("COMPLETING", State.RUNNING),
    ("SUSPENDED", State.RUNNING), ("STOPPED", State.RUNNING), ("SIGNALING", State.RUNNING),
    ("COMPLETED", State.COMPLETED), ("FAILED", State.FAILED), ("NODE_FAIL", State.FAILED),
    ("OUT_OF_MEMORY", State.FAILED), ("BOOT_FAIL", State.FAILED), ("PREEMPTED", State.FAILED),
    ("DEADLINE", State.FAILED), ("CANCELLED", State.CANCELED), ("CANCELLED by 1000", State.CANCELED),
    ("TIMEOUT", State.TIMED_OUT), ("SOMETHING_NEW", State.RUNNING),
])
def test_slurm_states_map_to_the_common_ones_keeping_slurms_word(word, state):
    status = status_of(word, "0:0", "None")
    assert (status.state, status.detail) == (state, word)


def test_the_detail_keeps_the_exit_code_and_the_reason():
    assert status_of("FAILED", "3:0", "NonZeroExitCode").detail == "FAILED, exit 3:0, NonZeroExitCode"
    assert status_of("TIMEOUT", "0:15", "TimeLimit").detail == "TIMEOUT, exit 0:15, TimeLimit"


@pytest.mark.parametrize("stderr, message, hint", [
    ("sbatch: error: Batch job submission failed: Invalid partition name specified\n",
     "sbatch: Batch job submission failed: Invalid partition name specified", "sinfo -s"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n",
     "sbatch: Batch job submission failed: Invalid account or account/partition combination specified",
     "targets.slurm.account"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification\n",
     "sbatch: Batch job submission failed: Invalid qos specification", "targets.slurm.qos"),
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's "
     "size and/or time limits)\n", "sbatch: Batch job submission failed: Job violates accounting/QOS policy (job "
     "submit limit, user's size and/or time limits)", "ask for less"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
     "sbatch: Batch job submission failed: Requested node configuration is not available", "sinfo -o"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
     "sbatch: Batch job submission failed: Unable to contact slurm controller (connect failure)", "scontrol ping"),
])
def test_a_refusal_is_one_line_with_slurms_message_and_what_to_do(stderr, message, hint):
    error = refusal("sbatch", stderr)
    assert error.message == message and hint in error.hint and "\n" not in str(error)


def test_scontrol_fields_keep_a_value_with_spaces_and_patterns_expand():
    record = fields("JobId=12 JobName=a-1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
                    "StdOut=/tmp/my logs/a-1-12.out NumNodes=2 NumTasks=4")
    assert (record["JobId"], record["StdOut"], record["NumTasks"]) == ("12", "/tmp/my logs/a-1-12.out", "4")
    assert expand("logs/%x-%j.out", "a-1", "12") == "logs/a-1-12.out"
    assert expand("100%%-%j", "a", "7") == "100%-7"
    assert label(" 3: text: more") == (3, "text: more")
    assert label("srun: error: n2: task 2: Exited") == (None, "srun: error: n2: task 2: Exited")


def test_without_sbatch_on_path_submit_says_where_to_run_it(tmp_path):
    path = spec(tmp_path, "hello")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent), PYTHONPATH=str(REPO))
    done = subprocess.run([*trainspec_cmd(), "submit", str(path), "-t", "slurm"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "sbatch not found (hint: run trainspec submit on a login node of the cluster" in done.stderr, done.stderr


def test_a_log_is_read_only_below_the_jobs_folder_and_never_through_a_link(tmp_path):
    # in process: the paths scontrol gives, a folder on the way that the job replaced with a link
    from trainspec.jobs.api import Context, Job, SubmitError
    from trainspec.targets.slurm.submit import SlurmScheduler

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x-12.out").write_text("CI-SECRET-VALUE\n")
    workdir = tmp_path / "work"
    (workdir / "logs").mkdir(parents=True)
    (workdir / "logs" / "x-12.out").write_text("a line\n")
    scheduler = SlurmScheduler(Context())

    def read(path: Path):
        job = Job("slurm", "x", "12", "", {"stdout": str(path), "stderr": "", "tasks_per_node": "1",
                                          "workdir": str(workdir)})
        return [line.text for line in scheduler.logs(job, None, False)[0]]

    assert read(workdir / "logs" / "x-12.out") == ["a line"]
    with pytest.raises(SubmitError, match=f"{outside}/x-12.out is not below the job's working folder {workdir}"):
        read(outside / "x-12.out")
    (workdir / "logs").rename(workdir / "old")
    (workdir / "logs").symlink_to(outside)
    with pytest.raises(SubmitError, match="is reached through a symbolic link .* not followed, not read"):
        read(workdir / "logs" / "x-12.out")


# --- on a real cluster -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(f"no Slurm cluster here: {reason}")
    # MinJobAge=300: a finished job stays in slurmctld's memory (this cluster keeps no accounting,
    # so that is where submit finds it again) however slowly a busy machine runs the commands.
    # Nodes of the size the example specs name, and their partitions, where their jobs only queue.
    with SlurmCluster(tmp_path_factory.mktemp("slurm-submit") / "cluster", min_job_age=300, node=H100_NODE,
                      queue_only=sorted(set(SLURM_SPECS.values()))) as running:
        yield running


SLURM_SPECS = {name: settings["partition"] for name, settings in example_specs("slurm").items()}  # and its partition


def spec(folder: Path, name: str, script: str = HELLO, extra: str = "") -> Path:
    """A two-node spec (two tasks per node, on the fake GPUs) whose command needs no torch."""
    (folder / "code").mkdir(exist_ok=True)
    (folder / "code" / "hello.py").write_text(script)
    path = folder / f"{name}.yaml"
    path.write_text(f"""version: 1
name: {name}
code: code
command: python hello.py
resources: {{nodes: 2, gpus_per_node: {GPUS_PER_NODE}, procs_per_node: 2}}
distribution: {{backend: gloo, launcher: per-process}}
targets:
  slurm:
    python: {sys.executable}
{extra}""")
    return path


def environment():
    """trainspec's command line as a user on a login node runs it: this worktree's trainspec, the
    venv's python first on PATH (the nodes run the job's `python`), quick polls."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    return ["env", f"PATH={path}", f"PYTHONPATH={REPO}", "TRAINSPEC_POLL_SECONDS=0.2", *trainspec_cmd()]


def trainspec(cluster, folder: Path, *args: str, timeout: float = BOUND) -> subprocess.CompletedProcess:
    """The command in the controller's namespace (a login node), from the spec's folder."""
    return cluster.run([*environment(), *args], cwd=folder, timeout=timeout)


def job_ids(cluster, name: str):
    done = cluster.run(["squeue", "--states=all", "--noheader", "--format=%i %j"])
    return [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] and line.split()[1].startswith(name)]


def submitted_id(output: str) -> str:
    found = re.search(r"(?:submitted|already submitted) \((\d+)\)", output)
    assert found, output
    return found.group(1)


def test_submit_wait_completes_and_a_second_submit_starts_nothing_new(cluster, tmp_path):
    path = spec(tmp_path, "hello")
    done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--wait", "--max-wait", "2m")
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = submitted_id(done.stdout)
    assert re.search(rf"hello-[0-9a-f]{{10}} on slurm: submitted \({job_id}\); watch: squeue -j {job_id}; output: "
                     rf"{re.escape(str(tmp_path))}/hello-[0-9a-f]{{10}}-{job_id}\.out", done.stdout), done.stdout
    assert re.search(r"completed \(COMPLETED\), exit 0$", done.stdout.strip()), done.stdout
    again = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--wait", "--max-wait", "2m")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"already submitted ({job_id}), not submitted again" in again.stdout, again.stdout
    assert job_ids(cluster, "hello-") == [job_id]  # one job of that name on the cluster

    # rank 0's lines (task 0, from both files) and the batch script's; --all-ranks: each node's
    logs = trainspec(cluster, tmp_path, "logs", str(path), "-t", "slurm")
    assert logs.returncode == 0, logs.stdout + logs.stderr
    assert logs.stdout.splitlines() == ["hello from rank 0 on node 0",  # the output file, then the error file
                                        "trainspec: slurm detected; world 4 = 2 node(s) x 2 process(es) "
                                        "[per-process]; master n1:6105", "to stderr from rank 0"], logs.stdout
    every = trainspec(cluster, tmp_path, "logs", str(path), "-t", "slurm", "--all-ranks")
    assert every.returncode == 0, every.stdout + every.stderr
    hello = sorted(line for line in every.stdout.splitlines() if "hello" in line)
    assert hello == [f"[node {rank // 2}] hello from rank {rank} on node {rank // 2}" for rank in range(4)], every.stdout
    assert sum("to stderr from rank" in line for line in every.stdout.splitlines()) == 4
    status = trainspec(cluster, tmp_path, "status", "-t", "slurm", "--id", job_id)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"completed (COMPLETED) ({job_id}); watch: squeue -j {job_id}" in status.stdout

    # a changed spec is a new job (its own name, its own id), followed with every node's lines
    changed = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--set", "env.X=1", "--follow",
                        "--all-ranks", "--max-wait", "2m")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert submitted_id(changed.stdout) != job_id and "already" not in changed.stdout
    assert "[node 1] hello from rank 3 on node 1" in changed.stdout.splitlines(), changed.stdout
    assert len(job_ids(cluster, "hello-")) == 2


def test_a_failing_command_exits_4_with_slurms_state_and_exit_code(cluster, tmp_path):
    path = spec(tmp_path, "fails", extra="env: {FAIL: '3'}\n")
    done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--follow", "--max-wait", "2m")
    assert done.returncode == 4, done.stdout + done.stderr
    # exit 3:0, or a higher code when srun's --kill-on-bad-exit ended a peer before it finished
    assert re.search(r"failed \(FAILED, exit \d+:\d+, NonZeroExitCode\), exit 4$", done.stdout.strip()), done.stdout
    assert "srun: error: n1: task 0: Exited with exit code 3" in done.stdout.splitlines(), done.stdout
    assert "hello from rank 0 on node 0" in done.stdout.splitlines()  # rank 0's lines only, unprefixed
    assert "hello from rank 1 on node 0" not in done.stdout


def test_ctrl_c_leaves_the_job_running_then_cancel_and_status_says_canceled(cluster, tmp_path):
    """Ctrl-C during --wait: exit 130, the job goes on (status: running, exit 7; --max-wait passes:
    exit 7 too); cancel; status --id --wait: canceled, exit 5."""
    path = spec(tmp_path, "sleeper", script=SLEEPER)
    log = tmp_path / "submit.log"
    command = ["nsenter", f"--net=/run/netns/{cluster.net.netns(0)}", *environment(), "submit", str(path),
               "-t", "slurm", "--wait", "--max-wait", "2m"]
    with log.open("w") as out:  # nsenter and env exec: the signal reaches trainspec itself
        waiting = subprocess.Popen(command, cwd=tmp_path, env=cluster.env(), stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + BOUND
        while "running (RUNNING)" not in log.read_text():
            assert waiting.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        waiting.send_signal(signal.SIGINT)
        assert waiting.wait(timeout=30) == 130, log.read_text()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    job_id = submitted_id(log.read_text())
    assert f"stopped waiting; the job goes on. Cancel it with: trainspec cancel -t slurm --id {job_id}" \
        in log.read_text()
    status = trainspec(cluster, tmp_path, "status", str(path), "-t", "slurm", "--wait", "--max-wait", "1s")
    assert status.returncode == 7 and "running (RUNNING)" in status.stdout, status.stdout + status.stderr
    assert "still running after --max-wait 1s; not waiting longer (it goes on)" in status.stdout, status.stdout
    cancel = trainspec(cluster, tmp_path, "cancel", str(path), "-t", "slurm")
    assert cancel.returncode == 0 and f"cancel requested ({job_id})" in cancel.stdout, cancel.stdout + cancel.stderr
    final = trainspec(cluster, tmp_path, "status", "-t", "slurm", "--id", job_id, "--wait", "--max-wait", "1m")
    assert final.returncode == 5, final.stdout + final.stderr
    assert re.search(r"canceled \(CANCELLED.*\), exit 5$", final.stdout.strip()), final.stdout


def test_logs_follow_streams_until_the_job_ends(cluster, tmp_path):
    path = spec(tmp_path, "follow", script=SLEEPER, extra="env: {SLEEP: '2'}\n")
    done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    follow = trainspec(cluster, tmp_path, "logs", str(path), "-t", "slurm", "--follow", "--all-ranks",
                       "--max-wait", "1m")
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert sorted(line for line in follow.stdout.splitlines() if "sleeping" in line) == \
        ["[node 0] sleeping rank 0", "[node 0] sleeping rank 1", "[node 1] sleeping rank 2", "[node 1] sleeping rank 3"]


def test_logs_never_follow_an_output_file_the_job_replaced_with_a_link(cluster, tmp_path):
    # the attack: the job's output file becomes a link to /proc/self/environ, which logs
    # would read in its own process: the CI machine's environment (a secret in it) printed
    path = spec(tmp_path, "relink", script=RELINK)
    done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--wait", "--max-wait", "2m")
    assert done.returncode == 0, done.stdout + done.stderr
    logs = cluster.run(["env", "CI_SECRET=ci-secret-4c1d", *environment(), "logs", str(path), "-t", "slurm"],
                       cwd=tmp_path, timeout=BOUND)
    assert "ci-secret-4c1d" not in logs.stdout + logs.stderr
    assert re.search(r"relink-[0-9a-f]{10}-\d+\.out is reached through a symbolic link \(the job replaced its log or "
                     r"a folder on the way with one\): not followed, not read", logs.stderr), logs.stdout + logs.stderr


def test_a_partition_that_does_not_exist_exits_3_with_slurms_message(cluster, tmp_path):
    path = spec(tmp_path, "nowhere", extra="    partition: nowhere\n")
    done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--wait", "--max-wait", "1m")
    assert done.returncode == 3, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("trainspec: error:")]
    assert len(errors) == 1 and "Invalid partition name specified (hint: the partition does not exist on this " \
        "cluster: `sinfo -s` lists them" in errors[0], done.stderr
    assert job_ids(cluster, "nowhere-") == []


def test_status_of_a_spec_never_submitted_exits_3_and_says_how(cluster, tmp_path):
    path = spec(tmp_path, "never")
    done = trainspec(cluster, tmp_path, "status", str(path), "-t", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "not submitted (no job of this name on the platform)" in done.stderr
    unknown = trainspec(cluster, tmp_path, "status", "-t", "slurm", "--id", "999999")
    assert unknown.returncode == 3, unknown.stdout + unknown.stderr
    assert "job 999999: slurmctld does not know it" in unknown.stderr, unknown.stderr


def test_a_job_of_the_same_name_is_followed_only_with_this_jobs_digest(cluster, tmp_path):
    """submit records the full digest as the job's comment (--comment=trainspec_digest=<hex>, what
    scontrol shows as Comment=: the second submit of the first test finds its job by it); a job
    of the name without it, made with sbatch by hand (held: it never runs), is an error."""
    from conftest import job_of

    path = spec(tmp_path, "planted")
    name, digest = job_of(path, "slurm")
    (tmp_path / "other.sbatch").write_text("#!/bin/bash\ntrue\n")
    held = cluster.run(["sbatch", "--parsable", "--hold", f"--job-name={name}", str(tmp_path / "other.sbatch")],
                       cwd=tmp_path)
    assert held.returncode == 0, held.stderr
    job_id = held.stdout.strip().split(";")[0]
    try:
        done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm", "--wait", "--max-wait", "1m")
        assert done.returncode == 3, done.stdout + done.stderr
        assert f"a job named {name} is already there ({job_id}; squeue -j {job_id}" in done.stderr, done.stderr
        assert f"it carries no trainspec_digest, not {digest}; nothing submitted" in done.stderr
        assert job_ids(cluster, "planted-") == [job_id]
    finally:
        cluster.run(["scancel", job_id])


WRITER = """import os, pathlib
print("code", open("version.txt").read().strip(), "rank", os.environ["RANK"], "in", os.getcwd(), flush=True)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs", "x-" + os.environ["RANK"]).write_text("written")  # a relative output, as ./outputs
"""


def test_a_queued_job_runs_the_code_as_submitted_and_writes_nothing_into_the_repository(cluster, tmp_path):
    """Issue 41: submitted while its partition is down (the job waits in the queue; this Slurm has no
    SBATCH_HOLD for `sbatch --hold`), the code edited in the repository while the job waits, the
    partition up again: the job runs the copy submit staged under its name
    (.trainspec/jobs/<job name>/slurm/code/), in a folder of its own (.trainspec/runs/<job id>/,
    which git ignores), so the repository, its edit undone, is as clean as it was. Slurm's output
    files land where sbatch ran (targets.slurm.logs moves them): the repository ignores them."""
    path = spec(tmp_path, "frozen", script=WRITER)
    (tmp_path / "code" / "version.txt").write_text("as-submitted\n")
    (tmp_path / ".gitignore").write_text("/*.out\n/*.err\n/.trainspec-cache/\n")  # the logs; the tests' cache (conftest)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "spec"]):
        subprocess.run([*git, *step], check=True, capture_output=True, timeout=BOUND)
    down = cluster.run(["scontrol", "update", "PartitionName=debug", "State=DOWN"])
    assert down.returncode == 0, down.stderr
    job_id = ""
    try:
        done = trainspec(cluster, tmp_path, "submit", str(path), "-t", "slurm")
        assert done.returncode == 0, done.stdout + done.stderr
        job_id = submitted_id(done.stdout)
        state = cluster.run(["squeue", "-j", job_id, "--noheader", "--format=%T %r"])
        assert state.stdout.split() == ["PENDING", "PartitionDown"], state.stdout  # it waits in the queue
        (tmp_path / "code" / "version.txt").write_text("edited-after-submit\n")  # the working tree moves on
    finally:
        up = cluster.run(["scontrol", "update", "PartitionName=debug", "State=UP"])
        assert up.returncode == 0, up.stderr
    try:
        final = trainspec(cluster, tmp_path, "status", "-t", "slurm", "--id", job_id, "--wait", "--max-wait", "2m")
        assert final.returncode == 0, final.stdout + final.stderr
    finally:
        cluster.run(["scancel", job_id])
    out = (tmp_path / next(p.name for p in tmp_path.glob(f"frozen-*-{job_id}.out"))).read_text()
    work = tmp_path / ".trainspec" / "runs" / job_id
    assert sorted(line.split(": ", 1)[1] for line in out.splitlines() if "code " in line) == \
        [f"code as-submitted rank {rank} in {work}" for rank in range(4)], out
    assert sorted(p.name for p in (work / "outputs").iterdir()) == ["x-0", "x-1", "x-2", "x-3"]
    [staged] = (tmp_path / ".trainspec" / "jobs").glob("frozen-*/slurm/code/version.txt")
    assert staged.read_text() == "as-submitted\n"
    assert not (tmp_path / "code" / "outputs").exists()
    subprocess.run([*git, "checkout", "-q", "--", "code"], check=True, timeout=BOUND)  # the edit undone
    clean = subprocess.run([*git, "status", "--porcelain", "--ignored=no"], capture_output=True, text=True,
                           timeout=BOUND)
    assert clean.stdout == "", clean.stdout


@pytest.mark.parametrize("spec_file", sorted(SLURM_SPECS))
def test_every_example_spec_submits_and_waits_in_its_partition(cluster, tmp_path, spec_file):
    """Issue 41: each spec of specs/ that names Slurm, as checked in, submitted from a copy of the
    repository's layout. sbatch holds its job to the nodes (the spec's size: 96 CPUs, 8 GPUs, 1900
    GiB) and its partition, which is down here: the job is accepted and waits, then is cancelled."""
    copy_examples(tmp_path)
    done = trainspec(cluster, tmp_path, "submit", f"specs/{spec_file}", "-t", "slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = submitted_id(done.stdout)
    try:
        queued = cluster.run(["squeue", "-j", job_id, "--noheader", "--format=%T %r %P"])
        assert queued.stdout.split() == ["PENDING", "PartitionDown", SLURM_SPECS[spec_file]], queued.stdout
    finally:
        cluster.run(["scancel", job_id])
