"""trainspec_ray_driver.py against a real Ray cluster on this machine: 2 simulated nodes (two
placement-group bundles on the one local node), the unmodified example scripts under the shim,
gloo over loopback.

The cluster (`ray start --head`, 2 CPUs, no dashboard) is started once for the module inside a
loopback-only network namespace: outside one, Ray rebinds 127.0.0.1 to the machine's routable
address (ray.md 3). A holder process keeps the namespace; every command runs in it through
`nsenter -n`. When the module ends -- or pytest dies and the holder's stdin closes -- the holder
kills every process in its namespace, by pid. `ray stop` is never used: it kills every Ray
process on the machine by name, other people's clusters included.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import conftest

from conftest import REPO

pytest.importorskip("ray", reason="ray is a test extra (pip install 'ray>=2.50'); the driver needs it")
conftest.installed("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
conftest.installed("lightning", reason="lightning is a test extra")

pytestmark = pytest.mark.realproc

DRIVER = REPO / "trainspec" / "runtime" / "ray_driver.py"
PROCS = REPO / "trainspec" / "runtime" / "procs.py"
REQUEST_TYPE = REPO / "trainspec" / "runtime" / "ray_request.py"
BIN = Path(sys.executable).parent
RESULT = re.compile(r"^\[(rank|node) (\d+)\] TRAINSPEC_RESULT (\{.*\})$", re.M)
CAN_NETNS = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("unshare", "nsenter", "ip"))
GCS_PORT = 6379  # alone in the namespace: no clash with any other cluster

# Runs in the namespace: says "ready", waits for stdin to close, then kills every other
# process of its network namespace (TERM, then KILL) and prints what would not die.
HOLDER = r"""
import json, os, signal, sys, time
own = os.readlink("/proc/self/ns/net")
def members():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open("/proc/%s/stat" % name) as stat:
                    state = stat.read().rpartition(")")[2].split()[0]
                if state != "Z" and os.readlink("/proc/%s/ns/net" % name) == own:
                    found.append(int(name))
            except (OSError, IndexError):
                pass  # gone
    return found
print("ready", flush=True)
sys.stdin.read()
for signum, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
    for pid in members():
        try:
            os.kill(pid, signum)
        except OSError:
            pass
    deadline = time.monotonic() + wait
    while members() and time.monotonic() < deadline:
        time.sleep(0.1)
print(json.dumps(members()), flush=True)
"""


class Namespace:
    """A loopback-only network namespace kept by a holder process; run commands in it."""

    def __init__(self):
        self.holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1"', sys.executable, HOLDER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.holder.stdout.readline().strip() != "ready":
            raise RuntimeError("the namespace holder did not start")
        self.netns = os.readlink("/proc/%d/ns/net" % self.holder.pid)
        assert self.netns != os.readlink("/proc/self/ns/net")

    def run(self, argv, **kwargs):
        return subprocess.run(self.argv(argv), **kwargs)

    def argv(self, argv):
        return ["nsenter", "-t", str(self.holder.pid), "-n", *map(str, argv)]

    def processes(self):
        """{pid: command line} of every process in the namespace but the holder."""
        found = {}
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == self.holder.pid:
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/net") == self.netns:
                    command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    if command:  # a zombie has none
                        found[int(name)] = command
            except OSError:
                pass
        return found

    def close(self):
        """Kill everything in the namespace; returns the pids that would not die."""
        try:
            out, _ = self.holder.communicate(timeout=300)  # closes its stdin: the holder's signal
            return json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            self.holder.kill()  # the holder failed: do its work from here
            self.holder.wait()
            for signum in (signal.SIGTERM, signal.SIGKILL):
                for pid in self.processes():
                    try:
                        os.kill(pid, signum)
                    except OSError:
                        pass
                time.sleep(5)
            return sorted(self.processes())


class Cluster:
    def __init__(self, ns, env):
        self.ns = ns
        self.env = env
        self.address = f"127.0.0.1:{GCS_PORT}"


@pytest.fixture(scope="module")
def cluster():
    if not CAN_NETNS:
        pytest.skip("needs root, unshare, nsenter and ip: outside a loopback-only network namespace Ray "
                    "binds the machine's routable address")
    temp = tempfile.mkdtemp(prefix="tsray", dir="/tmp")  # short: Ray's socket paths live under it
    ns = None
    try:
        ns = Namespace()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])  # the actors' `python` is this one
        started = ns.run([BIN / "ray", "start", "--head", "--port", GCS_PORT, "--num-cpus", "2", "--num-gpus", "0",
                          "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp,
                          "--log-color", "false",  # plain text to read, even with colorful (ray[default]) installed
                          "--object-store-memory", "100000000"],
                         env=env, capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "Local node IP: 127.0.0.1" in started.stdout + started.stderr, "Ray is not on loopback only"
        yield Cluster(ns, env)
    finally:
        stubborn = ns.close() if ns is not None else []
        shutil.rmtree(temp, ignore_errors=True)
        assert stubborn == [], f"processes left in the namespace: {stubborn}"


class Finished:
    """A finished launcher run: its output, exit code, and when each line arrived (monotonic clock)."""

    def __init__(self, returncode, stdout, stderr, lines, started, ended):
        self.returncode, self.stdout, self.stderr, self.lines = returncode, stdout, stderr, lines
        self.started, self.ended = started, ended

    def seen(self, text: str) -> float:
        """When the first line containing text arrived, on either stream."""
        found = [when for when, line in self.lines if text in line]
        assert found, f"never printed: {text!r}\n" + self.stdout[-3000:] + self.stderr[-3000:]
        return found[0]


def launch(cluster, tmp_path, *flags, command, wait=700, driver_timeout="600", **fields):
    """Run the driver copied as a compiled job has it (with trainspec_procs.py and
    trainspec_ray_request.py, next to the shim) on a job request of ``fields``; returns it finished,
    with the arrival time of every line, so a test can time what follows an event it saw rather than
    the whole run (whose start-up a busy machine stretches). ``wait``: seconds for the driver to end;
    ``driver_timeout``: its --timeout (None: none, as launch.sh runs it: the request's timeout, a
    field, applies)."""
    import json
    import threading

    from trainspec.runtime import shim_source

    (tmp_path / "trainspec_shim.py").write_text(shim_source("ray"))  # the shim a Ray job ships: core + Ray's detectors
    for source, name in ((DRIVER, "trainspec_ray_driver.py"), (PROCS, "trainspec_procs.py"),
                         (REQUEST_TYPE, "trainspec_ray_request.py")):
        shutil.copyfile(source, tmp_path / name)
    request = {"gpus_per_node": 0, "cpus_per_node": 1, "placement": "PACK", "workdir": ".", "env": {},
               "master_port": None, "timeout": None, "command": command, **fields}
    (tmp_path / "trainspec_ray_job.json").write_text(json.dumps(request))
    argv = [sys.executable, tmp_path / "trainspec_ray_driver.py", tmp_path / "trainspec_ray_job.json",
            "--address", cluster.address, *(["--timeout", driver_timeout] if driver_timeout else []), *flags]
    started = time.monotonic()
    popen = subprocess.Popen(cluster.ns.argv(argv), env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tmp_path)
    lines, streams = [], {"out": [], "err": []}

    def read(pipe, kept):
        for line in pipe:
            lines.append((time.monotonic(), line))
            kept.append(line)

    readers = [threading.Thread(target=read, args=(popen.stdout, streams["out"]), daemon=True),
               threading.Thread(target=read, args=(popen.stderr, streams["err"]), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        popen.wait(timeout=wait)
    finally:
        if popen.poll() is None:
            popen.kill()  # the module's namespace holder stops whatever it started
            popen.wait()
    ended = time.monotonic()
    for reader in readers:
        reader.join()
    return Finished(popen.returncode, "".join(streams["out"]), "".join(streams["err"]), sorted(lines), started, ended)


def expectations(launcher, nodes=2, procs=2):
    return {"TRAINSPEC_NODES": str(nodes), "TRAINSPEC_PROCS_PER_NODE": str(procs), "TRAINSPEC_LAUNCHER": launcher,
            "TRAINSPEC_SPEC": "tests/ray.yaml", "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}


PROBE = r"""
import json, sys, time
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + 300  # ends as soon as Ray has taken everything back
while True:
    cpu = ray.available_resources().get("CPU", 0)
    groups = sorted({group["state"] for group in ray.util.placement_group_table().values()})
    if (cpu == 2.0 and groups in ([], ["REMOVED"])) or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps({"cpu": cpu, "groups": groups}))
"""


def assert_nothing_left(cluster, *markers):
    """No process of the run survives, every actor's CPU is back, every placement group removed."""
    probe = cluster.ns.run([sys.executable, "-c", PROBE, cluster.address], env=cluster.env, capture_output=True,
                           text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    state = json.loads(probe.stdout.strip().splitlines()[-1])
    assert state == {"cpu": 2.0, "groups": ["REMOVED"]}, state
    left = {pid: cmd for pid, cmd in cluster.ns.processes().items()
            if "ray::Runner" in cmd or "trainspec_shim" in cmd or any(marker in cmd for marker in markers)}
    assert left == {}


def results(proc):
    found = []
    for kind, number, text in RESULT.findall(proc.stdout):
        result = json.loads(text)
        result["prefix"] = (kind, int(number))
        found.append(result)
    return sorted(found, key=lambda r: r["rank"])


def assert_world(proc, script, launcher):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = results(proc)
    assert [r["rank"] for r in found] == [0, 1, 2, 3], proc.stdout[-3000:]
    announced = re.search(r"master (127\.0\.0\.1:\d+)$", proc.stderr, re.M).group(1)
    for r in found:
        assert (r["script"], r["world_size"], r["allreduce"]) == (script, 4, 4)  # a real all_reduce over 4
        assert (r["node_rank"], r["local_rank"]) == (r["rank"] // 2, r["rank"] % 2)
        assert r["master"] == announced  # rank 0's node (the only one here) and the port its actor found
        # each line came back from the actor that ran it
        assert r["prefix"] == (("node", r["node_rank"]) if launcher == "per-node" else ("rank", r["rank"]))
    label = "node" if launcher == "per-node" else "rank"
    assert f"[{label} 0] trainspec: ray detected; world 4 = 2 node(s) x 2 process(es) [{launcher}]; " \
           f"master {announced}" in proc.stdout


def test_ddp_per_process(cluster, tmp_path):
    command = f"python {tmp_path}/trainspec_shim.py -- python {REPO}/examples/ddp/train.py --steps 3"
    proc = launch(cluster, tmp_path, nodes=2, procs_per_node=2, launcher="per-process",
                  env=expectations("per-process"), command=command)
    assert_world(proc, "ddp", "per-process")
    assert "trainspec: ray: all 4 ranks exited 0" in proc.stderr
    assert_nothing_left(cluster, "examples/ddp")


def test_lightning_per_node_spawns_its_workers(cluster, tmp_path):
    command = (f"python {tmp_path}/trainspec_shim.py -- python {REPO}/examples/mnist/train.py --num_nodes 2 "
               f"--devices 2 --output {tmp_path}/outputs")
    proc = launch(cluster, tmp_path, nodes=2, procs_per_node=2, launcher="per-node", placement="SPREAD",
                  env=expectations("per-node"), command=command)
    assert_world(proc, "mnist", "per-node")
    assert "trainspec: ray: all 2 nodes exited 0" in proc.stderr
    assert_nothing_left(cluster, "examples/mnist")


# seconds from the failing rank's last line to the driver's exit: the others get --grace (10 s),
# then SIGKILL and KILL_WAIT; output is drained and the actors and group removed. Measured ~3 s.
FAIL_WITHIN = 10 + 5 + 10 + 30


def test_a_failing_rank_stops_the_run(cluster, tmp_path):
    command = f"python {tmp_path}/trainspec_shim.py -- python {REPO}/examples/ddp/train.py --steps 3 --fail-rank 1"
    proc = launch(cluster, tmp_path, nodes=2, procs_per_node=2, launcher="per-process",
                  env=expectations("per-process"), command=command)
    assert proc.returncode == 7, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.ended - proc.seen("rank 1 failing on purpose") < FAIL_WITHIN
    assert "[rank 1] rank 1 failing on purpose" in proc.stdout
    assert "trainspec: error: rank 1 exited with code 7" in proc.stderr
    tail = proc.stderr.split("the run was stopped. Its last lines:\n")[1]
    assert "  | rank 1 failing on purpose\n" in tail
    assert "TRAINSPEC_RESULT" not in proc.stdout
    assert_nothing_left(cluster, "examples/ddp")


RUN_TIMEOUT = 25  # --timeout counts from the driver's start: far above the actors' start (~3 s quiet, ~6 s loaded)


def test_timeout_stops_every_process_group(cluster, tmp_path):
    # the command's background child is in the process group too, and must go with it
    proc = launch(cluster, tmp_path, "--timeout", str(RUN_TIMEOUT), "--grace", "2",
                  nodes=2, procs_per_node=2, launcher="per-node", command="echo started on node $NODE_RANK; sleep 313 & sleep 313; echo not reached")
    assert proc.returncode == 124, proc.stdout + proc.stderr
    assert "[node 0] started on node 0" in proc.stdout and "[node 1] started on node 1" in proc.stdout
    assert "not reached" not in proc.stdout
    assert (f"did not finish within its time limit (--timeout {RUN_TIMEOUT} s); every process was stopped"
            in proc.stderr)
    # stopped at the timeout, not when `sleep 313` ends: --grace 2, KILL_WAIT 5, the drain (10 s at
    # most) and the clean-up after it; the driver's own start (importing ray) is in the slack
    assert proc.ended - proc.started < RUN_TIMEOUT + 2 + 5 + 10 + 60
    assert_nothing_left(cluster, "sleep 313")


def test_the_specs_timeout_in_the_request_ends_the_job_and_says_so(cluster, tmp_path):
    # as launch.sh runs it: no --timeout; the request carries the spec's `timeout:` (RUN_TIMEOUT here)
    proc = launch(cluster, tmp_path, "--grace", "2", driver_timeout=None, timeout=RUN_TIMEOUT,
                  nodes=2, procs_per_node=1, launcher="per-process", command="echo started; sleep 317")
    assert proc.returncode == 124, proc.stdout + proc.stderr
    ended = [line for line in proc.stderr.splitlines() if "time limit" in line]
    assert ended == [f"trainspec: error: the job did not finish within its time limit (the spec's timeout: "
                     f"{RUN_TIMEOUT}s); every process was stopped"], proc.stderr
    assert proc.ended - proc.seen("started") < RUN_TIMEOUT + 2 + 5 + 10 + 60
    assert_nothing_left(cluster, "sleep 317")


def test_a_cluster_too_small_is_named(cluster, tmp_path):
    proc = launch(cluster, tmp_path, "--placement-timeout", "2", nodes=2, procs_per_node=1, launcher="per-process",
                  gpus_per_node=1, command="true")
    assert proc.returncode == 1, proc.stderr
    assert ("could not place 2 bundle(s) of {CPU: 1, GPU: 1} with PACK within 2 s (--placement-timeout); the "
            "cluster has {CPU: 2} on 1 alive node(s): 127.0.0.1 {CPU: 2}") in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_nothing_left(cluster)


def test_a_missing_workdir_is_named(cluster, tmp_path):
    proc = launch(cluster, tmp_path, nodes=1, procs_per_node=1, launcher="per-node", workdir="missing",
                  command="true")
    assert proc.returncode == 127, proc.stdout + proc.stderr
    assert f"[node 0] trainspec: error: cannot start bash -c in {tmp_path}/missing" in proc.stdout
    assert "does not exist on this node" in proc.stdout
    assert "node 0 exited with code 127" in proc.stderr
