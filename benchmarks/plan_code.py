"""`plan` and `review --git` of specs that share a large code folder, against `compile` of the same.

    python benchmarks/plan_code.py [--specs 100] [--files 50000] [--runs 3] [--keep DIR]

plan and review name every job after the digest of what it runs, the code folder's files
included (review/naming.py digest_of). The repository, generated in a temporary folder as a real
git history: --specs specs (Slurm and Azure ML each) sharing one code folder of --files small
files in 500 packages, build/ compiled and committed on main, and a branch that changes one spec's
command and one code file. Measured as whole processes from the repository root, medians of --runs
after one warm-up, in turns: `trainspec compile specs/ -o build/`, `trainspec plan specs/` with
an empty check cache (cold: TRAINSPEC_CACHE_DIR a fresh folder each run, so the code folder is
read once) and with the cache the previous run left (warm: files whose stat is unchanged are not
read), and `trainspec review --git main specs/` warm. Prints each as wall and CPU time and its
ratio to compile; and `review --git main specs/` warm on a second branch that adds a spec on
the same code folder and a README (every base spec's inputs unchanged: the code folder is
neither extracted from main nor hashed there). Before issue 40 the code folder was read once per spec and target: plan took
245 s and review 279 s where compile took 1.2 s. Writes benchmarks/results/plan_code.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from check_500 import git, trainspec  # benchmarks/, beside this script
from review_repo import _children_cpu

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

SPEC = """version: 1
name: job-{i:03d}
code: ../code
command: python train.py --seed {i}
resources: {{nodes: 2, gpus_per_node: 8}}
environment: {{image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04}}
targets:
  slurm: {{partition: h100, time: 1d}}
  azureml: {{compute: gpu-cluster, timeout: 1d}}
"""


def run(root: Path, args: List[str], cache: Optional[Path]) -> None:
    """One whole process (``cache``: its TRAINSPEC_CACHE_DIR; None: no check cache)."""
    env = dict(os.environ, TRAINSPEC_CACHE_DIR=str(cache) if cache is not None else "")
    proc = subprocess.run([*trainspec(), *args], cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"trainspec {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")


def make_repository(root: Path, specs: int, files: int) -> None:
    code = root / "code"
    for n in range(files):
        package = code / f"pkg{n % 500:03d}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"module_{n}.py").write_text(f"VALUE = {n}\n")
    (code / "train.py").write_text("print('train')\n")
    (root / "specs").mkdir()
    for i in range(specs):
        (root / "specs" / f"job-{i:03d}.yaml").write_text(SPEC.format(i=i))
    git("init", "-q", "-b", "main", cwd=root)
    run(root, ["compile", "specs/", "-o", "build/"], None)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs", cwd=root)
    git("checkout", "-q", "-b", "change", cwd=root)
    spec = root / "specs" / "job-007.yaml"
    spec.write_text(spec.read_text().replace("--seed 7", "--seed 77"))
    (code / "pkg001" / "module_1.py").write_text("VALUE = -1\n")
    run(root, ["compile", "specs/", "-o", "build/"], None)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "job-007's seed, module_1", cwd=root)
    # a second change that leaves every base spec's inputs as they were: a new spec on the shared
    # code folder and a README (review --git main on this branch leaves the code folder out)
    git("checkout", "-q", "-b", "added", "main", cwd=root)
    (root / "specs" / "job-new.yaml").write_text(SPEC.format(i=999).replace("job-999", "job-new"))
    (root / "README.md").write_text("the team's jobs\n")
    run(root, ["compile", "specs/", "-o", "build/"], None)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "job-new", cwd=root)
    git("checkout", "-q", "change", cwd=root)


def on(branch: str, root: Path, args: List[str], cache: Optional[Path]) -> tuple:
    """``timed`` on ``branch``, then back on the change."""
    git("checkout", "-q", branch, cwd=root)
    try:
        return timed(root, args, cache)
    finally:
        git("checkout", "-q", "change", cwd=root)


def timed(root: Path, args: List[str], cache: Optional[Path]) -> tuple:
    _children_cpu()
    started = time.perf_counter()
    run(root, args, cache)
    return time.perf_counter() - started, _children_cpu()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", type=int, default=100)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the repository here and keep it")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trainspec-plan-code-"))
    samples: Dict[str, List[float]] = {}
    try:
        root = args.keep or scratch / "repo"
        root.mkdir(parents=True)
        make_repository(root, args.specs, args.files)
        warm = scratch / "warm-cache"
        cases = {
            "compile": lambda: timed(root, ["compile", "specs/", "-o", "build/"], None),
            "plan_cold": lambda: timed(root, ["plan", "specs/", "--format", "json"],
                                       Path(tempfile.mkdtemp(dir=scratch))),
            "plan_warm": lambda: timed(root, ["plan", "specs/", "--format", "json"], warm),
            "review_warm": lambda: timed(root, ["review", "--git", "main", "specs/"], warm),
            "review_added": lambda: on("added", root, ["review", "--git", "main", "specs/"], warm),
        }
        for attempt in range(args.runs + 1):  # the first round warms the page cache and the check cache
            for key, case in cases.items():
                wall, cpu = case()
                if attempt:
                    samples.setdefault(key, []).append(wall)
                    samples.setdefault(f"{key}_cpu", []).append(cpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in samples.items()}
    load = os.getloadavg()[0]
    result = {"specs": args.specs, "files": args.files, "runs": args.runs, "cpus": os.cpu_count(),
              "load_average_1min": load, **{f"{k}_median_s": v for k, v in median.items()},
              **{f"{k}_over_compile": median[k] / median["compile"]
                 for k in ("plan_cold", "plan_warm", "review_warm", "review_added")},
              "samples": samples}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plan_code.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.specs} specs x 2 targets over one code folder of {args.files:,} files, {os.cpu_count()} cores "
          f"(load average {load:.1f}), median of {args.runs}:")
    for key, label in (("compile", "compile"), ("plan_cold", "plan, empty check cache"),
                       ("plan_warm", "plan, warm check cache"), ("review_warm", "review --git main, warm"),
                       ("review_added", "review, code unchanged")):
        ratio = "" if key == "compile" else f"  ({median[key] / median['compile']:.2f}x compile)"
        print(f"  {label + ':':28} {median[key]:7.2f} s wall, {median[key + '_cpu']:7.2f} s CPU{ratio}")


if __name__ == "__main__":
    main()
