"""`trainspec check` of a team's repository at scale: 500 specs, one output folder each.

    python benchmarks/check_500.py [--specs 500] [--runs 7] [--keep DIR]

The repository is what a team keeps (README, GitOps): specs/ extending a shared base in bases/,
a team catalog trainspec-skus.yaml at the root, a shared conda file in envs/, the training code
in examples/,
and build/ compiled by trainspec and committed, in a git repository under a temporary folder.
Measured as a user runs it, whole processes: `trainspec check specs/ --out build/` cold (an
empty check cache, TRAINSPEC_CACHE_DIR pointing at a fresh folder each run) and warm (the cache
the previous run left), the median of --runs after one warm-up each, interleaved cold warm cold
warm. Writes benchmarks/results/check_500.json and prints the figures.
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
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

BASE = """version: 1
framework: pytorch
resources:
  sku: Standard_ND96isr_H100_v5
environment:
  image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04
  conda_file: ../envs/ddp.yml
env:
  NCCL_DEBUG: WARN
targets:
  azureml:
    compute: gpu-cluster
    experiment_name: team
    timeout: 2d
"""
SPEC = """extends: ../bases/gpu.yaml
name: job-{i:04d}
code: ../examples/ddp
command: python train.py --seed {i} --epochs {{{{ vars.epochs }}}}
vars:
  epochs: {epochs}
resources:
  nodes: {nodes}
  sku: {sku}
env:
  RUN: "{i}"
"""
TEAM_SKUS = """skus:
  Standard_ND96isr_H200_v5:
    gpus: 8
    gpu: H200
    infiniband: true
"""


def trainspec() -> List[str]:
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=cwd,
                   check=True, capture_output=True)


def make_repository(root: Path, count: int) -> Path:
    """A team's repository of ``count`` specs with their outputs compiled and committed."""
    (root / "specs").mkdir(parents=True)
    (root / "bases").mkdir()
    (root / "examples").mkdir()
    shutil.copytree(REPO / "examples" / "ddp", root / "examples" / "ddp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "envs").mkdir()
    shutil.copy(REPO / "examples" / "ddp" / "environment.yml", root / "envs" / "ddp.yml")
    (root / "bases" / "gpu.yaml").write_text(BASE)
    (root / "trainspec-skus.yaml").write_text(TEAM_SKUS)
    for i in range(count):
        sku = "Standard_ND96isr_H200_v5" if i % 3 == 0 else "Standard_ND96isr_H100_v5"
        (root / "specs" / f"job-{i:04d}.yaml").write_text(SPEC.format(i=i, nodes=1 + i % 8, epochs=1 + i % 5,
                                                                       sku=sku))
    git("init", "-q", "-b", "main", cwd=root)
    subprocess.run([*trainspec(), "compile", "specs/", "-o", "build/"], cwd=root, check=True, capture_output=True)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs and outputs", cwd=root)
    return root


def timed_check(root: Path, cache: Path) -> float:
    env = dict(os.environ, TRAINSPEC_CACHE_DIR=str(cache))
    started = time.perf_counter()
    proc = subprocess.run([*trainspec(), "check", "specs/", "--out", "build/"], cwd=root, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"trainspec check failed:\n{proc.stdout}{proc.stderr}")
    return elapsed


def measure(root: Path, runs: int, scratch: Path) -> Dict[str, List[float]]:
    samples: Dict[str, List[float]] = {"cold": [], "warm": []}
    warm_cache = scratch / "warm-cache"
    for attempt in range(runs + 1):  # the first round warms the page cache and bytecode, and is dropped
        cold_cache = scratch / f"cold-cache-{attempt}"
        cold = timed_check(root, cold_cache)
        shutil.rmtree(cold_cache, ignore_errors=True)
        if attempt == 0:
            timed_check(root, warm_cache)  # fills the warm cache
            continue
        samples["cold"].append(cold)
        samples["warm"].append(timed_check(root, warm_cache))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="build the repository here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trainspec-check-bench-"))
    try:
        root = make_repository(args.keep or scratch / "repo", args.specs)
        samples = measure(root, args.runs, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {"specs": args.specs, "runs": args.runs, "cpus": os.cpu_count(),
              **{f"{k}_median_s": statistics.median(v) for k, v in samples.items()},
              "samples": samples}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "check_500.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"trainspec check, {args.specs} specs (one output folder each), {os.cpu_count()} cores, "
          f"median of {args.runs}: cold {result['cold_median_s']:.2f} s, warm {result['warm_median_s']:.2f} s")


if __name__ == "__main__":
    main()
