"""`trainspec submit/status/logs/cancel -t ray` against a real Ray head started here, with its
dashboard's job server (ray[default]), inside a loopback-only network namespace
(test_ray_driver.py's Namespace: outside one, Ray binds the machine's routable address). One
head for the module; the holder kills every process of the namespace by pid when it ends (no
`ray stop`, which would kill every Ray process on the machine by name).

Every trainspec command runs this worktree's code (PYTHONPATH) inside the namespace, bounded, with
TRAINSPEC_POLL_SECONDS=0.2. Each test uses its own spec name, so no test finds another's job.
The `ray up` path (no address) runs with a fake `ray` first on PATH, as test_ray_launch.py does.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_examples, example_specs
from test_ray_driver import BIN, CAN_NETNS, Namespace

from trainspec.jobs.api import Context, LogLine, State, Status, SubmitError
from trainspec.targets.ray import submit as ray_submit

pytest.importorskip("ray.dashboard", reason="the job server is ray[default]'s dashboard")
pytestmark = pytest.mark.realproc

DASHBOARD = "http://127.0.0.1:8265"
COMMAND_LIMIT = 180  # s: a hang guard far above any command here

JOB = """import os, sys, time
print("hello from rank", os.environ["RANK"], "home-ok", os.path.isfile(os.path.join(os.environ["HOME"], "trainspec",
      "trainspec_shim.py")), flush=True)
mode = sys.argv[1]
if mode == "fail" and os.environ["RANK"] == "1":
    sys.exit(3)
if mode == "sleep":
    time.sleep(600)
"""

SPEC = """version: 1
name: {name}
code: code
command: python job.py {mode}
framework: pytorch
distribution:
  launcher: per-process  # one Ray actor a rank: the driver names the rank that failed, and logs are rank 0's
{timeout}resources:
  nodes: 1
  procs_per_node: 2
  sku: Standard_D4s_v3
targets:
  ray:
    location: eastus
    resource_group: rg
{extra}"""

FAKE_RAY = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_RAY_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "get-head-ip":
    print("127.0.0.1")
"""


class Head:
    def __init__(self, ns, env):
        self.ns = ns
        self.env = env

    def ts(self, *args, cwd, env=None):
        """trainspec (this worktree's) in the namespace; the CompletedProcess."""
        full = {**self.env, "PYTHONPATH": str(REPO), "TRAINSPEC_POLL_SECONDS": "0.2", **(env or {})}
        return self.ns.run([BIN / "python", "-m", "trainspec.cli", *args], cwd=cwd, env=full,
                           capture_output=True, text=True, timeout=COMMAND_LIMIT)

    def api(self, path):
        """GET the job server's path, from inside the namespace: (status, JSON or None)."""
        probe = ("import json, sys, urllib.request, urllib.error\n"
                 "try:\n"
                 "    r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status); print(r.read().decode())\n"
                 "except urllib.error.HTTPError as e:\n"
                 "    print(e.code); print('null')\n"
                 "except OSError as e:\n"
                 "    print(0); print('null')\n")
        done = self.ns.run([BIN / "python", "-c", probe, DASHBOARD + path], capture_output=True, text=True, timeout=60)
        status, _, body = done.stdout.partition("\n")
        return int(status), json.loads(body or "null")


@pytest.fixture(scope="module")
def head():
    if not CAN_NETNS:
        pytest.skip("needs root, unshare, nsenter and ip: outside a loopback-only network namespace Ray "
                    "binds the machine's routable address")
    temp = tempfile.mkdtemp(prefix="tssub", dir="/tmp")  # short: Ray's socket paths live under it
    ns = None
    try:
        ns = Namespace()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])  # the actors' `python` is this one
        started = ns.run([BIN / "ray", "start", "--head", "--port", "6379", "--num-cpus", "8", "--num-gpus", "0",
                          "--include-dashboard=true", "--dashboard-host", "127.0.0.1", "--dashboard-port", "8265",
                          "--disable-usage-stats", "--temp-dir", temp, "--object-store-memory", "100000000"],
                         env=env, capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, started.stdout + started.stderr
        head = Head(ns, env)
        deadline = time.monotonic() + 120
        while head.api("/api/version")[0] != 200:  # the job server answers once the dashboard is up
            assert time.monotonic() < deadline, "the dashboard did not answer within 120 s"
            time.sleep(0.5)
        yield head
    finally:
        stubborn = ns.close() if ns is not None else []
        shutil.rmtree(temp, ignore_errors=True)
        assert stubborn == [], f"processes left in the namespace: {stubborn}"


def spec(tmp_path, name, mode="ok", timeout="60s", extra=""):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "job.py").write_text(JOB)
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, mode=mode, timeout=f"timeout: {timeout}\n" if timeout else "",
                                extra=extra))
    return path.name


def submit(head, tmp_path, spec_file, *flags, env=None):
    return head.ts("submit", spec_file, "-t", "ray", "--address", DASHBOARD, *flags, cwd=tmp_path, env=env)


def document(proc):
    return json.loads(proc.stdout)["jobs"][0]


# --- against the real job server -------------------------------------------------------------------

def test_submit_follow_prints_rank_0_and_a_second_submit_finds_the_job(head, tmp_path):
    spec_file = spec(tmp_path, "follow")
    first = submit(head, tmp_path, spec_file, "--follow")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "hello from rank 0 home-ok True" in first.stdout  # the shim found at $HOME/trainspec
    assert "rank 1" not in first.stdout  # rank 0 only, its prefix taken off
    assert "completed (SUCCEEDED), exit 0" in first.stdout
    name = first.stdout.split(" on ray:")[0]
    status, info = head.api(f"/api/jobs/{name}")
    assert status == 200 and info["status"] == "SUCCEEDED" and info["submission_id"] == name

    again = submit(head, tmp_path, spec_file, "--wait", "--format", "json")
    assert again.returncode == 0, again.stdout + again.stderr
    job = document(again)
    assert (job["submitted"], job["id"], job["state"]) == ("found", name, "completed")
    assert "already submitted" in again.stderr
    status, jobs = head.api("/api/jobs/")
    assert [j["submission_id"] for j in jobs].count(name) == 1

    ranks = head.ts("logs", "--id", name, "-t", "ray", "--address", DASHBOARD, "--all-ranks", cwd=tmp_path)
    assert ranks.returncode == 0, ranks.stderr
    assert "[node 0] [rank 0] hello from rank 0" in ranks.stdout
    assert "[node 0] [rank 1] hello from rank 1" in ranks.stdout
    by_spec = head.ts("status", spec_file, "-t", "ray", "--address", DASHBOARD, cwd=tmp_path)
    assert by_spec.returncode == 0 and f"completed (SUCCEEDED) ({name})" in by_spec.stdout


def test_a_job_of_the_same_name_is_followed_only_with_this_jobs_digest(head, tmp_path):
    """submit records the full digest in the job's metadata (trainspec_digest: the second submit of
    the first test finds its job by it); a job of the name without it, submitted to the job server
    by anyone who can reach the dashboard, is an error."""
    from conftest import job_of

    spec_file = spec(tmp_path, "planted")
    name, digest = job_of(tmp_path / spec_file, "ray")
    post = ("import json, sys, urllib.request\n"
            "body = json.dumps({'entrypoint': 'true', 'submission_id': sys.argv[2]}).encode()\n"
            "request = urllib.request.Request(sys.argv[1], data=body, headers={'Content-Type': 'application/json'})\n"
            "print(urllib.request.urlopen(request, timeout=30).status)\n")
    made = head.ns.run([BIN / "python", "-c", post, DASHBOARD + "/api/jobs/", name], capture_output=True, text=True,
                       timeout=60)
    assert made.stdout.strip() == "200", made.stdout + made.stderr
    done = submit(head, tmp_path, spec_file, "--wait")
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"a job named {name} is already there ({name}; {DASHBOARD}/#/jobs/{name})" in done.stderr, done.stderr
    assert f"it carries no trainspec_digest, not {digest}; nothing submitted" in done.stderr


def test_a_failing_rank_is_exit_4_with_the_drivers_words(head, tmp_path):
    done = submit(head, tmp_path, spec(tmp_path, "failing", mode="fail"), "--wait")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "failed (FAILED (exit 3)" in done.stdout and "rank 1 exited with code 3" in done.stdout


def test_the_specs_timeout_is_exit_6(head, tmp_path):
    done = submit(head, tmp_path, spec(tmp_path, "slow", mode="sleep", timeout="8s"), "--wait")
    assert done.returncode == 6, done.stdout + done.stderr
    assert "timed-out (FAILED (exit 124)" in done.stdout


def test_cancel_stops_the_job_and_status_says_canceled(head, tmp_path):
    spec_file = spec(tmp_path, "canceled", mode="sleep", timeout=None)
    started = submit(head, tmp_path, spec_file)
    assert started.returncode == 0, started.stdout + started.stderr
    name = started.stdout.split(" on ray:")[0]
    running = head.ts("status", "--id", name, "-t", "ray", "--address", DASHBOARD, cwd=tmp_path)
    assert running.returncode == 7, running.stdout + running.stderr  # queued or running: it goes on
    canceled = head.ts("cancel", spec_file, "-t", "ray", "--address", DASHBOARD, "--wait", "--max-wait", "2m",
                       cwd=tmp_path)
    assert canceled.returncode == 0, canceled.stdout + canceled.stderr
    assert "cancel requested" in canceled.stdout
    final = head.ts("status", "--id", name, "-t", "ray", "--address", DASHBOARD, cwd=tmp_path)
    assert final.returncode == 5 and "canceled (STOPPED" in final.stdout, final.stdout + final.stderr


def test_an_unknown_id_is_said(head, tmp_path):
    done = head.ts("status", "--id", "nope-0000000000", "-t", "ray", "--address", DASHBOARD, cwd=tmp_path)
    assert done.returncode == 3
    assert "no job nope-0000000000 on the cluster" in done.stderr


def test_an_unreachable_dashboard_is_exit_3_in_one_line(head, tmp_path):
    done = head.ts("submit", spec(tmp_path, "nowhere"), "-t", "ray", "--address", "http://127.0.0.1:9", "--wait",
                   cwd=tmp_path)
    assert done.returncode == 3
    errors = [line for line in done.stderr.splitlines() if line.startswith("trainspec: error:")]
    assert len(errors) == 1 and "dashboard at http://127.0.0.1:9 is unreachable" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("keep", [False, True])
def test_without_an_address_ray_up_starts_the_cluster_and_after_tears_it_down(head, tmp_path, keep):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ray").write_text(FAKE_RAY)
    (fake / "ray").chmod(0o755)
    log = tmp_path / "ray-calls.jsonl"
    spec_file = spec(tmp_path, "brought-up-kept" if keep else "brought-up",
                     extra="    keep_cluster: true\n" if keep else "")
    env = {"PATH": f"{fake}{os.pathsep}{head.env['PATH']}", "FAKE_RAY_LOG": str(log)}
    done = head.ts("submit", spec_file, "-t", "ray", "--wait", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    teardown = [] if keep else [["down", "-y", "cluster.yaml"]]
    assert calls == [["up", "-y", "cluster.yaml"], ["get-head-ip", "cluster.yaml"], *teardown]
    assert ("the cluster is kept" in done.stdout) == keep


@pytest.mark.parametrize("spec_file", sorted(example_specs("ray")))
def test_every_example_spec_submits_and_is_canceled(head, tmp_path, spec_file):
    """Issue 41: each spec of specs/ that names Ray, as checked in, submitted from a copy of the
    repository's layout to the real job server, where it waits: its nodes and GPUs are more than
    this one CPU head has, so it never trains here. It is canceled at once."""
    copy_examples(tmp_path)
    started = submit(head, tmp_path, f"specs/{spec_file}")
    assert started.returncode == 0, started.stdout + started.stderr
    name = started.stdout.split(" on ray:")[0]
    assert name.startswith(Path(spec_file).stem + "-"), started.stdout
    waiting = head.ts("status", "--id", name, "-t", "ray", "--address", DASHBOARD, cwd=tmp_path)
    assert waiting.returncode == 7, waiting.stdout + waiting.stderr  # queued or running: it goes on
    canceled = head.ts("cancel", "--id", name, "-t", "ray", "--address", DASHBOARD, "--wait", "--max-wait", "2m",
                       cwd=tmp_path)
    assert canceled.returncode == 0, canceled.stdout + canceled.stderr


# --- without a cluster ---------------------------------------------------------------------------

def test_no_address_and_no_ray_names_the_extra(tmp_path):
    scheduler = ray_submit.RayJobs(Context(env={"PATH": str(tmp_path)}))
    with pytest.raises(SubmitError) as caught:
        scheduler.address(tmp_path)
    assert "pip install 'trainspec[ray]'" in str(caught.value)
    with pytest.raises(SubmitError, match="no --address and no RAY_ADDRESS"):
        ray_submit.RayJobs(Context(env={})).by_id("x")


@pytest.mark.parametrize("info, state, detail", [
    ({"status": "PENDING"}, State.QUEUED, "PENDING"),
    ({"status": "RUNNING"}, State.RUNNING, "RUNNING"),
    ({"status": "SUCCEEDED", "driver_exit_code": 0}, State.COMPLETED, "SUCCEEDED"),
    ({"status": "STOPPED", "message": "Job was intentionally stopped."}, State.CANCELED,
     "STOPPED: Job was intentionally stopped."),
    ({"status": "FAILED", "driver_exit_code": 2, "message": "failed with exit code 2, logs:\ntrainspec: error: boom\n  | x"},
     State.FAILED, "FAILED (exit 2): trainspec: error: boom"),
    ({"status": "FAILED", "driver_exit_code": 124}, State.TIMED_OUT, "FAILED (exit 124)"),
    ({"status": "FAILED", "message": "Job entrypoint command failed with exit code 124, last logs"},
     State.TIMED_OUT, "FAILED (exit 124): Job entrypoint command failed with exit code 124, last logs"),
])
def test_ray_states_in_the_common_words(info, state, detail):
    assert ray_submit.status_of(info) == Status(state, detail)


def test_log_lines_rank_0_or_every_node():
    text = "trainspec: ray: 4 processes\n[rank 0] a\n[rank 3] b\n[node 1] c\n"
    assert ray_submit.log_lines(text, False, 2) == [LogLine("head", "trainspec: ray: 4 processes"),
                                                    LogLine("0", "a")]
    assert ray_submit.log_lines(text, True, 2) == [LogLine("head", "trainspec: ray: 4 processes"),
                                                   LogLine("0", "[rank 0] a"), LogLine("1", "[rank 3] b"),
                                                   LogLine("1", "c")]


@pytest.mark.parametrize("given, expected", [("http://h:8265/", "http://h:8265"), ("h:8265", "http://h:8265"),
                                             ("https://ray.example/x", "https://ray.example/x")])
def test_dashboard_address(given, expected):
    assert ray_submit.dashboard_address(given) == expected


def test_a_ray_client_address_is_refused():
    with pytest.raises(SubmitError, match="not the address of a Ray dashboard"):
        ray_submit.dashboard_address("ray://h:10001")


def test_status_without_a_cluster_address_says_where_to_look(tmp_path):
    """Without --address or RAY_ADDRESS, status cannot ask anything: it says so (exit 3), never
    "not submitted", which would send the user to submit the job again."""
    import os

    from conftest import REPO, ts

    spec = tmp_path / "job.yaml"
    spec.write_text(f"version: 1\nname: ask\ncode: {REPO / 'examples' / 'ddp'}\ncommand: python train.py\n"
                    "resources: {nodes: 1, sku: Standard_D4s_v5, gpus_per_node: 0, procs_per_node: 1}\n"
                    "targets: {ray: {location: eastus, resource_group: rg}}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = ts("status", str(spec), "-t", "ray", cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stderr
    assert "no cluster to ask" in proc.stderr and "not submitted" not in proc.stderr
