"""A Ray job's launch.sh, run as a user runs it, with a fake `ray` first on PATH that records
every call: whatever ends the job -- its end, a failure, the time limit, Ctrl-C -- the cluster is
torn down (`ray down -y cluster.yaml`), unless targets.ray.keep_cluster keeps it, and then the
script says how to delete it. No sleeps: the test waits (bounded) for the line the fake prints
once `ray exec` runs, then interrupts."""

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, SPECS, ts

WAIT = 60  # seconds, at most, for anything the script does here: it runs no real Ray

FAKE_RAY = f"""#!{sys.executable}
import json, os, signal, sys
with open(os.environ["FAKE_RAY_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
verb = sys.argv[1]
if verb == "exec" and os.environ.get("FAKE_RAY_EXEC") == "wait":
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it, as it ends ssh
    print("fake ray: exec running", flush=True)
    signal.pause()
sys.exit(int(os.environ.get("FAKE_RAY_" + verb.upper(), "0")))
"""


@pytest.fixture
def job(tmp_path):
    """The compiled Ray job of the example spec (``keep``: with keep_cluster), and a fake ray."""
    def compile_job(keep=False):
        text = (SPECS / "ray-lightning.yaml").read_text().replace("code: ../examples/", f"code: {REPO}/examples/")
        if keep:
            text = text.replace("    head: worker\n", "    head: worker\n    keep_cluster: true\n")
        spec = tmp_path / "spec.yaml"
        spec.write_text(text)
        ts("compile", str(spec), "-t", "ray", "-o", str(tmp_path / "out"), cwd=tmp_path, check=True)
        return tmp_path / "out" / "ray-lightning" / "ray"

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ray").write_text(FAKE_RAY)
    (fake / "ray").chmod(0o755)
    return compile_job, fake, tmp_path / "ray-calls.jsonl"


def start(folder, fake, log, **behaviour):
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "FAKE_RAY_LOG": str(log),
           **{f"FAKE_RAY_{k.upper()}": v for k, v in behaviour.items()}}
    return subprocess.Popen(["bash", str(folder / "launch.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def calls(log):
    return [json.loads(line)[:2] for line in log.read_text().splitlines()]


EXEC = ["exec", "cluster.yaml"]


@pytest.mark.parametrize("exit_code, why", [("0", "success"), ("1", "failure"), ("124", "the time limit")])
def test_the_cluster_is_torn_down_however_the_job_ends(job, exit_code, why):
    compile_job, fake, log = job
    proc = start(compile_job(), fake, log, exec=exit_code)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == int(exit_code), err  # the job's own exit code, after the teardown
    assert calls(log) == [["up", "-y"], EXEC, ["down", "-y"]], why
    assert json.loads(log.read_text().splitlines()[-1]) == ["down", "-y", "cluster.yaml"]
    assert f"trainspec: the job ended (exit {exit_code}); tearing the cluster down: ray down -y cluster.yaml" in err


def test_a_cluster_that_failed_to_start_is_torn_down_too(job):
    compile_job, fake, log = job
    proc = start(compile_job(), fake, log, up="1")
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1 and calls(log) == [["up", "-y"], ["down", "-y"]], err  # whatever ray up made


def test_ctrl_c_tears_the_cluster_down(job):
    compile_job, fake, log = job
    proc = start(compile_job(), fake, log, exec="wait")
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + WAIT, ""
    while "fake ray: exec running" not in seen:
        assert time.monotonic() < deadline and proc.poll() is None, "ray exec never ran"
        if selector.select(timeout=max(0.0, deadline - time.monotonic())):
            seen += proc.stdout.readline()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, err
    assert calls(log) == [["up", "-y"], EXEC, ["down", "-y"]]
    assert "trainspec: the job ended (exit 130); tearing the cluster down" in err


def test_a_failed_teardown_says_the_vms_may_still_run(job):
    compile_job, fake, log = job
    folder = compile_job()
    proc = start(folder, fake, log, down="1")
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err  # the job's result: it succeeded
    assert f"ray down failed: its VMs may still run (and cost); delete them: ray down -y {folder}/cluster.yaml" in err


def test_keep_cluster_keeps_it_and_says_how_to_delete_it(job):
    compile_job, fake, log = job
    folder = compile_job(keep=True)
    proc = start(folder, fake, log, exec="1")
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1
    assert calls(log) == [["up", "-y"], EXEC]  # no ray down
    assert (f"trainspec: the cluster is kept (targets.ray.keep_cluster: true); delete it: ray down -y "
            f"{folder}/cluster.yaml") in err


def test_plan_says_whether_the_cluster_outlives_the_job(job, tmp_path):
    compile_job, _, _ = job
    compile_job()
    plan = json.loads(ts("plan", "spec.yaml", "-t", "ray", "--format", "json", cwd=tmp_path, check=True).stdout)
    assert plan["jobs"][0]["targets"][0]["settings"]["cluster"] == (
        "torn down when the job ends, however it ends (launch.sh runs `ray down -y cluster.yaml`)")
    compile_job(keep=True)
    plan = json.loads(ts("plan", "spec.yaml", "-t", "ray", "--format", "json", cwd=tmp_path, check=True).stdout)
    assert plan["jobs"][0]["targets"][0]["settings"]["cluster"] == (
        "kept after the job (targets.ray.keep_cluster): `ray down -y cluster.yaml` in the job's folder deletes it")
