"""trainspec against the floor and its peers, side by side in one run.

    python benchmarks/run.py [--runs 9] [--quick] [--no-peers]

Absolute times on a shared 2-core machine are noise; ratios measured interleaved in the same
run are not. Every case is a whole process (cold start), the median of --runs after one
warm-up, interleaved A B C A B C. Peers run in their own virtualenvs under
benchmarks/.venvs/ (created on first use; a peer that cannot be installed is skipped with a
line saying so). Writes benchmarks/results/run.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / "benchmarks" / ".venvs"
RESULTS = REPO / "benchmarks" / "results"
SPEC = REPO / "specs" / "mnist-lightning.yaml"
# as the specs in specs/ are written (block style)
ALL_TARGET_SPEC = """version: 1
name: bench-{i}
code: {code}
command: python train.py --num_nodes {{{{ nodes }}}} --devices {{{{ procs_per_node }}}} --seed {i}
framework: lightning
resources:
  nodes: {nodes}
  sku: Standard_ND96isr_H100_v5
environment:
  image: rayproject/ray:2.60.0-py311-gpu
env:
  NCCL_DEBUG: WARN
  RUN: "{i}"
targets:
  azureml:
    compute: gpu-cluster
    experiment_name: bench
  hpcpack:
    shared_dir: /app
    node_group: LinuxNodes
  ray:
    location: eastus
    resource_group: rg-bench
"""
# the same spec in flow mappings: `{image: ray:2.60...}` has a colon inside a flow mapping, which
# libyaml (YAML 1.1) declines, so these take ruamel's pure-Python loader (schema/loader.py)
FLOW_SPEC = """version: 1
name: bench-{i}
code: {code}
command: python train.py --num_nodes {{{{ nodes }}}} --devices {{{{ procs_per_node }}}} --seed {i}
framework: lightning
resources: {{nodes: {nodes}, sku: Standard_ND96isr_H100_v5}}
environment: {{image: rayproject/ray:2.60.0-py311-gpu}}
env: {{NCCL_DEBUG: WARN, RUN: "{i}"}}
targets:
  azureml: {{compute: gpu-cluster, experiment_name: bench}}
  hpcpack: {{shared_dir: /app, node_group: LinuxNodes}}
  ray: {{location: eastus, resource_group: rg-bench}}
"""


def trainspec() -> List[str]:
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


def timed(argv: List[str], cwd: Path = REPO, env: Optional[Dict[str, str]] = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    return time.perf_counter() - started


def interleaved(cases: Dict[str, List[str]], runs: int, cwd: Path = REPO) -> Dict[str, List[float]]:
    for argv in cases.values():
        timed(argv, cwd)  # warm-up: .pyc, page cache
    samples: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            samples[name].append(timed(argv, cwd))
    return samples


def peer_venv(name: str, packages: List[str]) -> Optional[Path]:
    """A virtualenv with ``packages`` under benchmarks/.venvs/, or None if they cannot be installed."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    # the packages and where the virtualenv was made: its scripts name their python by its
    # absolute path, so a copied or moved virtualenv (another checkout's) is made again here
    wanted = f"{' '.join(packages)} in {venv.resolve()}"
    if marker.exists() and marker.read_text() == wanted:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], capture_output=True, text=True)
    if result.returncode != 0:
        print(f"  skipped {name}: pip install {' '.join(packages)} failed: {result.stderr.strip()[-200:]}")
        return None
    marker.write_text(wanted)
    return python


def cold_start(runs: int, peers: bool, out: Path) -> Dict[str, List[float]]:
    cases: Dict[str, List[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "trainspec compile, 1 spec x 3 targets": [*trainspec(), "compile", str(out / "one" / "spec.yaml"),
                                                  "-t", "azureml", "-t", "hpcpack", "-t", "ray",
                                                  "-o", str(out / "one" / "build")],
    }
    one = out / "one"
    one.mkdir(parents=True, exist_ok=True)
    (one / "spec.yaml").write_text(ALL_TARGET_SPEC.format(i=0, nodes=2, code=REPO / "examples" / "mnist"))
    subprocess.run(cases["trainspec compile, 1 spec x 3 targets"], check=True, capture_output=True)
    job = one / "build" / "bench-0" / "azureml" / "job.yml"
    try:
        import azure.ai.ml  # noqa: F401
        cases["azure-ai-ml load_job + to_rest (our job.yml)"] = [
            sys.executable, "-c",
            "import sys; from azure.ai.ml import load_job; "
            "load_job(sys.argv[1])._to_job()._to_rest_object()", str(job)]
    except ImportError:
        print("  skipped azure-ai-ml: not installed here (pip install -e '.[test]')")
    if peers:
        torchx = peer_venv("torchx", ["torchx==0.7.0", "kubernetes"])
        if torchx is not None:
            (one / "train.py").write_text("print('hi')\n")
            base = [str(torchx.with_name("torchx")), "run", "--workspace=", "--dryrun"]
            cases["torchx dry run, slurm 2x4"] = [*base, "-s", "slurm", "dist.ddp", "-j", "2x4", "--gpu", "4",
                                                  "--script", str(one / "train.py")]
            cases["torchx dry run, kubernetes 2x4"] = [*base, "-s", "kubernetes", "-cfg", "queue=default",
                                                       "dist.ddp", "-j", "2x4", "--gpu", "4",
                                                       "--script", str(one / "train.py")]
    else:
        print("  skipped peers: --no-peers")
    return interleaved(cases, runs)


def batch(count: int, out: Path, template: str = ALL_TARGET_SPEC, name: str = "batch") -> Dict[str, float]:
    """count specs x every target in one process; then `trainspec compile` and `check` over them."""
    folder = out / name
    (folder / "specs").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / "specs" / f"s{i:04d}.yaml").write_text(
            template.format(i=i, nodes=1 + i % 8, code=REPO / "examples" / "mnist"))
    code = ("import sys, time; from pathlib import Path\n"
            "from trainspec.registry.build import build, find_specs\n"
            "files = find_specs([sys.argv[1]]); t = time.perf_counter()\n"
            "n = sum(len(build(f, Path(sys.argv[2])).artifacts) for f in files)\n"
            "print(n, time.perf_counter() - t)")
    result = subprocess.run([sys.executable, "-c", code, str(folder / "specs"), str(folder / "build")],
                            check=True, capture_output=True, text=True, cwd=REPO)
    outputs, seconds = result.stdout.split()
    compile_all = timed([*trainspec(), "compile", str(folder / "specs"), "-o", str(folder / "build")])
    check_all = timed([*trainspec(), "check", str(folder / "specs"), "--out", str(folder / "build")])
    return {"specs": count, "target_outputs": int(outputs), "in_process_s": float(seconds),
            "outputs_per_s": int(outputs) / float(seconds), "compile_cli_s": compile_all, "check_cli_s": check_all}


def shim(runs: int) -> Dict[str, List[float]]:
    """The shim as the issue words it, and as compiled jobs start it (`python -I -S`, see
    compiler/base.py SHIM_FLAGS). Both exec the command: tests/test_runtime_detectors.py
    test_shim_execs_the_command checks that no process stays in between."""
    shim_file = REPO / "trainspec" / "runtime" / "shim.py"
    command = ["--", sys.executable, "-c", "pass"]
    env_cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python shim.py -- python -c pass": [sys.executable, str(shim_file), *command],
        "python -I -S shim.py -- ... (compiled jobs)": [sys.executable, "-I", "-S", str(shim_file), *command],
    }
    return interleaved(env_cases, runs)


def precompile() -> None:
    """Bytecode for trainspec's modules, as `pip install` of a wheel leaves it. An editable install
    under PYTHONDONTWRITEBYTECODE=1 (set on the development machine) would otherwise recompile
    every module at every start (~15 ms) and measure the environment, not trainspec."""
    import compileall

    compileall.compile_dir(str(REPO / "trainspec"), quiet=1)


def local_run(runs: int, out: Path) -> Dict[str, List[float]]:
    """`trainspec run --local` of a 2x2 CPU Lightning job against the same job by hand with torchrun."""
    try:
        import lightning  # noqa: F401
    except ImportError:
        print("  skipped the local-run comparison: torch/lightning are not installed")
        return {}
    script = REPO / "examples" / "mnist" / "train.py"
    spec = REPO / "specs" / "mnist-lightning.yaml"
    cases = {
        "trainspec run --local 2x2 Lightning": [*trainspec(), "run", str(spec), "--local", "--procs-per-node", "2",
                                                "--workdir", str(out / "local")],
        "torchrun by hand 2 nodes x 2 Lightning": [
            "bash", "-c",
            f"cd {out} && port=$(( 20000 + RANDOM % 20000 )) && for n in 0 1; do "
            f"GLOO_SOCKET_IFNAME=lo {Path(sys.executable).with_name('torchrun')} --nnodes 2 --nproc_per_node 2 "
            f"--node_rank $n --master_addr 127.0.0.1 --master_port $port {script} --num_nodes 2 --devices 2 & "
            "done; wait"],
    }
    return interleaved(cases, runs, cwd=out)


def table(title: str, samples: Dict[str, List[float]], floor: Optional[str] = None) -> List[dict]:
    rows = []
    print(f"\n{title}")
    print(f"  {'case':<46}{'median ms':>11}{'min ms':>9}{'x first':>9}")
    base = statistics.median(samples[floor]) if floor else None
    for name, values in samples.items():
        median = statistics.median(values)
        ratio = f"{median / base:.1f}" if base else ""
        print(f"  {name:<46}{median * 1000:>11.1f}{min(values) * 1000:>9.1f}{ratio:>9}")
        rows.append({"case": name, "median_s": median, "min_s": min(values), "runs": len(values)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--no-peers", action="store_true", help="do not create or use peer virtualenvs")
    parser.add_argument("--no-local-run", action="store_true", help="skip the (slow) local-run comparison")
    args = parser.parse_args()
    report: Dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        precompile()
        print("cold start (whole processes, interleaved):")
        cold = cold_start(args.runs, not args.no_peers, out)
        report["cold_start"] = table("cold start", cold, floor="python -c pass")
        for key, template, style in (("batch", ALL_TARGET_SPEC, "block style, as specs/"),
                                     ("batch_flow", FLOW_SPEC, "flow mappings: ruamel's pure-Python loader")):
            report[key] = b = batch(args.batch, out, template, key)
            print(f"\n{key} ({style}): {b['target_outputs']} target outputs from {b['specs']} specs in "
                  f"{b['in_process_s']:.2f} s in one process = {b['outputs_per_s']:.0f} outputs/s; "
                  f"`compile` CLI {b['compile_cli_s']:.2f} s, `check` CLI {b['check_cli_s']:.2f} s")
        report["shim"] = table("shim overhead", shim(args.runs * 2), floor="python -c pass")
        if not args.no_local_run:
            report["local_run"] = table("local run, 2 nodes x 2 processes", local_run(max(3, args.runs // 3), out))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "run.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS / 'run.json'}")


if __name__ == "__main__":
    main()
