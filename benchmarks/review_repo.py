"""The pull-request review of a team's repository at scale: `trainspec review --git` against the
`plan --git` + `diff --git` the example workflow ran before it.

    python benchmarks/review_repo.py [--runs 3] [--keep DIR] [--baseline CHECKOUT]

The repository is generated in a temporary folder, a real git history: 236 specs of five teams
(vision, language, speech, reinforcement learning, research), each team on shared bases in
bases/, all five targets between them (Azure ML, HPC Pack, Ray, Slurm, Kubernetes), a team
catalog, the training code, build/ compiled and committed on main. A branch then makes what a
pull request makes: the language team's H100 base bumps its image (18 jobs read it), one job
doubles its nodes, one job changes its command, one job is added and one removed; recompiled and
committed. Measured as the workflow runs them, whole processes from the repository root, medians
of --runs after one warm-up, interleaved: `trainspec review --git main specs/` against `trainspec
plan --git main specs/ --format markdown` then `trainspec diff --git main specs/ --format
markdown`, and with --baseline the same plan + diff run by another checkout of trainspec (the
tree before review, on PYTHONPATH). Each as wall time and CPU time (user + system of the
processes: on a shared machine the wall time grows with everyone else's work, the CPU time much
less). Prints the figures, review's ratios, the comment's size and the said-once figure (how many
shared changes the diff opens with, and the jobs each names, and how many plans were cut to their
headings); checks that review's comment stays under 60,000 characters, opens with plan's cost
summary and holds at least what plan and diff printed (it is theirs byte for byte unless one had
to be cut: then the two share the comment's room). Writes benchmarks/results/review_repo.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

OLD_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"
NEW_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda12.1-cudnn8-ubuntu22.04"

# Each team's bases: file -> text. Paths in a base are relative to it.
BASES: Dict[str, str] = {
    # vision: Azure ML and Slurm on the same H100 nodes
    "vision.yaml": f"""version: 1
framework: pytorch
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: {OLD_IMAGE}
env:
  NCCL_DEBUG: WARN
targets:
  azureml:
    compute: h100-cluster
    experiment_name: vision
    timeout: 2d
  slurm:
    partition: h100
    time: 2d
""",
    # language: Azure ML, a general base and the H100 base 18 jobs extend
    "language.yaml": f"""version: 1
framework: pytorch
resources:
  nodes: 1
  sku: Standard_NC48ads_A100_v4
environment:
  image: {OLD_IMAGE}
  conda_file: ../envs/ddp.yml
env:
  NCCL_DEBUG: WARN
targets:
  azureml:
    compute: a100-cluster
    experiment_name: language
    timeout: 1d
""",
    "language-h100.yaml": f"""extends: language.yaml
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: {OLD_IMAGE}
targets:
  azureml:
    compute: h100-cluster
    timeout: 3d
""",
    # speech: HPC Pack, 4 V100 per node, torchrun on each node
    "speech.yaml": """version: 1
framework: pytorch
resources:
  nodes: 2
  gpus_per_node: 4
distribution:
  launcher: per-node
env:
  NCCL_DEBUG: WARN
targets:
  hpcpack:
    shared_dir: /app
    node_group: H100Nodes
    python: /opt/conda/envs/torch/bin/python
    priority: Normal
    runtime: 12h
    project: speech
""",
    # reinforcement learning: Ray on A100 VMs
    "rl.yaml": """version: 1
framework: pytorch
resources:
  nodes: 2
  sku: Standard_ND96asr_v4
  shm_size: 32g
environment:
  image: rayproject/ray:2.60.0-py311-gpu
env:
  NCCL_DEBUG: WARN
targets:
  ray:
    location: eastus
    resource_group: rg-rl
    head: worker
""",
    # research: Kubernetes and Slurm
    "research.yaml": """version: 1
framework: pytorch
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
env:
  NCCL_DEBUG: WARN
targets:
  kubernetes:
    namespace: research
    queue: research
    timeout: 12h
  slurm:
    partition: h100
    time: 12h
""",
}
TEAM_SKUS = """computes:
  h100-cluster: Standard_ND96isr_H100_v5
  a100-cluster: Standard_NC48ads_A100_v4
partitions:
  h100: Standard_ND96isr_H100_v5
node_groups:
  H100Nodes: Standard_ND96isr_H100_v5
"""
# (team, base, how many specs): 236 in all, 18 of them on language-h100.yaml
TEAMS: List[Tuple[str, str, int]] = [
    ("vision", "vision.yaml", 48),
    ("language", "language.yaml", 28),
    ("language-big", "language-h100.yaml", 18),
    ("speech", "speech.yaml", 48),
    ("rl", "rl.yaml", 47),
    ("research", "research.yaml", 47),
]
SPEC = """extends: ../bases/{base}
name: {name}
description: {team} job {i}
code: ../code
command: python train.py --seed {i} --epochs {{{{ vars.epochs }}}}
vars:
  epochs: {epochs}
env:
  RUN: "{i}"
"""
BUMPED = 18  # the jobs the language team's H100 base bump touches


def trainspec() -> List[str]:
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def compile_and_commit(root: Path, message: str) -> None:
    proc = subprocess.run([*trainspec(), "compile", "specs/", "-o", "build/", "--prune"], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"trainspec compile failed:\n{proc.stdout}{proc.stderr}")
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", message, cwd=root)


def make_repository(root: Path) -> Path:
    """The team repository on main, and the pull request's branch `change` checked out."""
    (root / "specs").mkdir(parents=True)
    (root / "bases").mkdir()
    (root / "envs").mkdir()
    shutil.copytree(REPO / "examples" / "ddp", root / "code", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "examples" / "ddp" / "environment.yml", root / "envs" / "ddp.yml")
    for name, text in BASES.items():
        (root / "bases" / name).write_text(text)
    (root / "trainspec-skus.yaml").write_text(TEAM_SKUS)
    count = 0
    for team, base, many in TEAMS:
        for i in range(many):
            name = f"{team}-{i:02d}"
            (root / "specs" / f"{name}.yaml").write_text(SPEC.format(base=base, name=name, team=team, i=i,
                                                                     epochs=1 + i % 5))
            count += 1
    assert count == 236, count
    git("init", "-q", "-b", "main", cwd=root)
    compile_and_commit(root, "236 specs of five teams")
    git("checkout", "-q", "-b", "change", cwd=root)
    edit(root / "bases" / "language-h100.yaml", OLD_IMAGE, NEW_IMAGE)  # 18 jobs
    edit(root / "specs" / "vision-07.yaml", "env:\n", "resources:\n  nodes: 4\nenv:\n")  # 2 -> 4 nodes
    edit(root / "specs" / "research-03.yaml", "--seed 3 ", "--seed 33 ")
    (root / "specs" / "speech-47.yaml").unlink()
    (root / "specs" / "rl-new.yaml").write_text(SPEC.format(base="rl.yaml", name="rl-new", team="rl", i=99, epochs=2))
    compile_and_commit(root, "bump the language H100 image; vision-07 on 4 nodes; research-03's seed; "
                             "speech-47 gone; rl-new")
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def timed(root: Path, *commands: List[str], tree: Optional[Path] = None) -> Tuple[float, float, str]:
    """The wall time and the CPU time (user + system: what a loaded machine does not inflate) of
    ``commands`` run one after the other, and what they printed, joined as the workflow joined
    them (a blank line between)."""
    outputs = []
    cpu = 0.0
    started = time.perf_counter()
    for args in commands:
        env = dict(os.environ, PYTHONPATH=str(tree)) if tree is not None else None  # another checkout's trainspec
        proc = subprocess.Popen([*trainspec(), *args], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        out, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"trainspec {' '.join(args)} failed:\n{out}{err}")
        outputs.append(out)
        cpu += _children_cpu()
    return time.perf_counter() - started, cpu, "\n".join(outputs)


_SEEN_CPU = [0.0]


def _children_cpu() -> float:
    """The CPU time of the children reaped since the last call."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    spent, _SEEN_CPU[0] = total - _SEEN_CPU[0], total
    return spent


REVIEW = ["review", "--git", "main", "specs/"]
PLAN = ["plan", "--git", "main", "specs/", "--format", "markdown"]
DIFF = ["diff", "--git", "main", "specs/", "--format", "markdown"]


def measure(root: Path, runs: int, baseline: Optional[Path]) -> Tuple[Dict[str, List[float]], str, str]:
    """Interleaved: review, plan + diff, and (``baseline``) plan + diff of another checkout."""
    samples: Dict[str, List[float]] = {}
    comment = before = ""
    for attempt in range(runs + 1):  # the first round warms the page cache and bytecode, and is dropped
        measured = {"review": timed(root, REVIEW), "plan_and_diff": timed(root, PLAN, DIFF)}
        if baseline is not None:
            measured["baseline_plan_and_diff"] = timed(root, PLAN, DIFF, tree=baseline)
        comment, before = measured["review"][2], measured["plan_and_diff"][2]
        if attempt:
            for key, (wall, cpu, _) in measured.items():
                samples.setdefault(key, []).append(wall)
                samples.setdefault(f"{key}_cpu", []).append(cpu)
    return samples, comment, before


PLAN_CUT = "(the rest of this job's plan is in the full plan)"  # a plan cut to its heading


def said_once(comment: str) -> Dict[str, object]:
    """The shared changes the diff opens with, and how many jobs each names."""
    found = re.findall(r"^## Change (\w+): the same in (\d+) jobs$", comment, re.M)
    return {"shared_changes": len(found), "jobs_per_shared_change": [int(n) for _, n in found]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the repository here and keep it (default: a temporary folder)")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also time plan + diff of the trainspec in this checkout (e.g. the tree before "
                             "review: /work/main), on PYTHONPATH")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trainspec-review-bench-"))
    try:
        root = make_repository(args.keep or scratch / "repo")
        samples, comment, before = measure(root, args.runs, args.baseline)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if len(comment) >= 60_000 or comment.split("\n## ", 1)[0] != before.split("\n## ", 1)[0]:
        raise SystemExit("review's comment is over 60,000 characters, or its cost summary is not plan's")
    if comment != before and (comment.count(PLAN_CUT) > before.count(PLAN_CUT) or len(comment) < len(before)):
        raise SystemExit("review's comment holds less than plan and diff printed")
    median = {k: statistics.median(v) for k, v in samples.items()}
    shared = said_once(comment)
    load = os.getloadavg()[0]
    result = {"specs": 236, "runs": args.runs, "cpus": os.cpu_count(), "load_average_1min": load,
              "baseline": str(args.baseline) if args.baseline else None,
              **{f"{k}_median_s": v for k, v in median.items()},
              "comment_chars": len(comment), **shared, "plans_cut": comment.count(PLAN_CUT),
              "plans_cut_by_plan_alone": before.count(PLAN_CUT), "samples": samples}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "review_repo.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"236 specs, {os.cpu_count()} cores (load average {load:.1f}), median of {args.runs}:")
    labels = {"review": "review --git", "plan_and_diff": "plan --git + diff --git",
              "baseline_plan_and_diff": f"plan + diff of {args.baseline}"}
    for key, label in labels.items():
        if key in median:
            print(f"  {label + ':':40} {median[key]:6.2f} s wall, {median[key + '_cpu']:6.2f} s CPU"
                  + (f"  (review: {median['review'] / median[key]:.2f}x wall, "
                     f"{median['review_cpu'] / median[key + '_cpu']:.2f}x CPU)" if key != "review" else ""))
    print(f"  comment: {len(comment):,} characters (GitHub's limit 65,536); said once: {shared['shared_changes']} "
          f"shared change(s), naming {shared['jobs_per_shared_change']} jobs; plans cut to their heading: "
          f"{comment.count(PLAN_CUT)} (plan --git alone: {before.count(PLAN_CUT)})")

if __name__ == "__main__":
    main()
