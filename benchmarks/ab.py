"""Cold `trainspec compile` of one spec, for several checkouts side by side, interleaved.

    python benchmarks/ab.py [--runs 25] TREE [TREE ...]     # e.g. a worktree of the base and .

Each run is a whole process of this interpreter's `trainspec` console script with the tree
first on PYTHONPATH, compiling specs/mnist-lightning.yaml (an Azure ML job, as a user would);
the trees take turns (A B C A B C ...), so a busy machine slows them alike; each tree's bytecode
is compiled first. Prints the median
and the minimum per tree, and each median's ratio to the first tree's. What a refactoring that
must not slow `compile` down is checked with (docs/speed.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "specs" / "mnist-lightning.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts of trainspec (folders holding trainspec/)")
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("trainspec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]
    times = {tree: [] for tree in args.trees}
    import compileall

    for tree in args.trees:  # bytecode first, as a wheel install has it: a tree without it pays compiling
        compileall.compile_dir(str(tree / "trainspec"), quiet=1)
    with tempfile.TemporaryDirectory() as out:
        for run in range(args.runs + 1):  # the first round warms the file cache and is not counted
            for tree in args.trees:
                env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
                start = time.perf_counter()
                done = subprocess.run([*command, "compile", str(SPEC), "-o", out], env=env, capture_output=True,
                                      text=True)
                elapsed = time.perf_counter() - start
                if done.returncode != 0:
                    print(f"{tree}: compile failed:\n{done.stderr}", file=sys.stderr)
                    return 1
                if run:
                    times[tree].append(elapsed)
    first = statistics.median(times[args.trees[0]])
    for tree, found in times.items():
        median = statistics.median(found)
        print(f"{str(tree):40s} median {median * 1000:6.1f} ms  min {min(found) * 1000:6.1f} ms  "
              f"x {median / first:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
