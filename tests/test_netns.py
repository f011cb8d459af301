"""Simulated nodes on separate hosts: `trainspec run --local --netns`.

Each node runs in a network namespace of its own (one interface, an address on a private
bridge, no route anywhere else), so MASTER_ADDR is another host's address and gloo's traffic
crosses a veth pair, not loopback. A probe script (real torch.distributed, gloo) reports from
every rank its network namespace and the address it talks to the master from; the tests check
that node 1 is really elsewhere, for Azure ML per-process, per-node torchrun and HPC Pack.
"""

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

import conftest

from conftest import REPO, loopback_only, path_env, sigterm_when, trainspec_cmd

conftest.installed("torch", reason="torch is a test extra: pip install torch==2.13.0 first")

pytestmark = [
    pytest.mark.realproc,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
                       reason="--netns creates network namespaces: needs root and iproute2"),
]

PROBE = textwrap.dedent("""\
    import json, os, socket, time

    if os.environ.get("HANG_RANK") == os.environ.get("RANK"):  # before importing torch: printed at once
        print("hanging before init", flush=True)
        time.sleep(3600)

    from datetime import timedelta
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=300))
    master = os.environ["MASTER_ADDR"]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.connect((master, 9))  # picks the route and source address; sends nothing
    me = {"rank": dist.get_rank(), "node": int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0"))),
          "netns": os.readlink("/proc/self/ns/net"), "address": udp.getsockname()[0], "master": master,
          "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, me)
    if dist.get_rank() == 0:
        print("PROBE " + json.dumps(everyone), flush=True)
    dist.destroy_process_group()
    os._exit(0)
""")

SPEC = """\
version: 1
name: netns-probe
code: {code}
command: python probe.py
resources: {{nodes: 2, gpus_per_node: 2}}
distribution: {{launcher: {launcher}}}
environment: {{image: pytorch}}
targets:
  azureml: {{compute: local}}
  hpcpack: {{shared_dir: /unused, node_group: LinuxNodes}}
"""


def start(tmp_path: Path, target: str, launcher: str, *extra: str, spec_extra: str = ""):
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(code=code, launcher=launcher) + spec_extra)
    # the run itself in a loopback-only namespace: whatever it makes can reach nothing else
    command = loopback_only([*trainspec_cmd(), "run", str(spec), "--local", "--netns", "-t", target,
                             "--procs-per-node", "2", "--workdir", str(tmp_path / "work"), *extra])
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=path_env(), cwd=REPO)


def namespaces_left(proc) -> bool:
    prefix = re.search(r"network namespaces (trainspec-\d+)-0", proc.stderr).group(1)
    return prefix in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def run_probe(tmp_path: Path, target: str, launcher: str):
    proc = start(tmp_path, target, launcher)
    found = re.search(r"PROBE (\[.*\])$", proc.stdout, re.M)
    assert proc.returncode == 0 and found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(found.group(1))


@pytest.mark.parametrize("target, launcher", [
    ("azureml", "per-process"),  # Azure ML's pytorch distribution: every process started by the platform
    ("azureml", "per-node"),     # torchrun on each node; node 0's agent opens the store
    ("hpcpack", "per-node"),     # HPC Pack tasks; the master elected through the shared folder
])
def test_nodes_are_separate_hosts_and_master_addr_is_node_0s(tmp_path, target, launcher):
    proc, ranks = run_probe(tmp_path, target, launcher)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    by_node = {n: [r for r in ranks if r["node"] == n] for n in (0, 1)}
    assert [len(v) for v in by_node.values()] == [2, 2]
    # one namespace per node, neither of them the test's
    spaces = {n: {r["netns"] for r in v} for n, v in by_node.items()}
    assert all(len(s) == 1 for s in spaces.values()) and spaces[0] != spaces[1]
    assert os.readlink("/proc/self/ns/net") not in spaces[0] | spaces[1]
    # MASTER_ADDR is node 0's own address, and from node 1 it is another host
    master = {r["master"] for r in ranks}
    assert master == {"10.213.0.2"}
    assert {r["address"] for r in by_node[0]} == {"10.213.0.2"}
    assert {r["address"] for r in by_node[1]} == {"10.213.0.3"}
    assert {r["ifname"] for r in ranks} == {"eth0"}  # gloo on the namespace's interface, not lo
    assert not namespaces_left(proc)  # every namespace (and veth) is gone afterwards


RENDEZVOUS_TIMEOUT = 15  # the hanging rank prints before importing torch: within ~0.2 s of its start, even loaded


def test_a_master_that_never_opens_is_seen_from_inside_the_namespaces(tmp_path):
    """The master watch probes node 0's address from node 0's namespace (the runner's own cannot
    reach it); the run stops, says why, and still removes every namespace. Rank 0 says it hangs
    before anything heavy, so its line is there long before the bound, however busy the machine."""
    proc = start(tmp_path, "azureml", "per-process", "--rendezvous-timeout", str(RENDEZVOUS_TIMEOUT),
                 spec_extra="env: {HANG_RANK: '0'}\n")
    assert proc.returncode == 124, proc.stderr[-3000:]
    assert "nothing listened on the master address 10.213.0.2:" in proc.stderr
    assert "  | hanging before init" in proc.stderr
    assert not namespaces_left(proc)


def test_netns_needs_root_and_says_so(tmp_path):
    """Not root: one clear line and exit 1, nothing started (run as an unprivileged user)."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop root for this check")
    import tempfile

    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*drop, *trainspec_cmd(), "--version"], capture_output=True).returncode != 0:
        pytest.skip("this interpreter is not usable by an unprivileged user (it lives in a root-only directory)")
    shared = Path(tempfile.mkdtemp(prefix="trainspec-netns-"))  # pytest's tmp_path is root's alone
    try:
        os.chmod(shared, 0o777)
        code = shared / "code"
        code.mkdir()
        (code / "probe.py").write_text(PROBE)
        spec = shared / "spec.yaml"
        spec.write_text(SPEC.format(code=code, launcher="per-process"))
        command = [*drop, *trainspec_cmd(), "run", str(spec), "--local", "--netns", "--workdir", str(shared / "work")]
        env = path_env(HOME=str(shared))
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=shared)
        assert proc.returncode == 1, proc.stderr
        assert "--netns needs root" in proc.stderr and "Traceback" not in proc.stderr
        assert "running" not in proc.stderr  # nothing was started
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_sigterm_to_the_runner_stops_every_process_and_deletes_every_namespace(tmp_path):
    """`kill PID` of `trainspec run --netns` (CI cancelling a job): rank 0 hangs before the
    rendezvous, the others wait for it; the runner, told SIGTERM once rank 0 has said so, stops
    every process group, deletes the namespaces and exits 143."""
    import uuid

    from trainspec.runtime.procs import KILL_AFTER

    marker = uuid.uuid4().hex
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(code=code, launcher="per-process") + f"env: {{HANG_RANK: '0', MARKER: '{marker}'}}\n")
    command = loopback_only([*trainspec_cmd(), "run", str(spec), "--local", "--netns", "-t", "azureml",
                             "--procs-per-node", "2", "--workdir", str(tmp_path / "work"), "--timeout", "600"])
    returncode, errors, left = sigterm_when(command, path_env(), lambda line: line.startswith(
        "[rank 0] hanging before init"), f"MARKER={marker}", timeout=KILL_AFTER + 60)
    assert returncode == 143, errors[-3000:]
    assert "terminated (SIGTERM); every process was stopped and every network namespace deleted" in errors
    assert left == []
    prefix = re.search(r"network namespaces (trainspec-\d+)-0", errors).group(1)
    assert prefix not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
