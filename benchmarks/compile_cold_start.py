"""Cold start of `trainspec compile`: whole processes, medians, interleaved with the floor.

    python benchmarks/compile_cold_start.py [--runs 15]

Measures, side by side in one run (absolute times on a shared 2-core machine are noise;
ratios are not): `python -c pass` (the floor), `trainspec compile` of one spec, and of every
example spec. Also reports which heavy modules the compile process imported (must be none).
Prints a table and writes benchmarks/results/compile_cold_start.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "azure.ai.ml", "lightning")


def trainspec() -> list:
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


def timed(argv) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - started


def heavy_imports(out: str) -> list:
    code = ("import sys; from trainspec.cli import main\n"
            "try:\n main(['compile', 'specs/mnist-lightning.yaml', '-o', %r])\n"
            "except SystemExit: pass\n"
            "print('HEAVY:' + ','.join(m for m in %r if m in sys.modules))" % (out, HEAVY))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    line = next(l for l in result.stdout.splitlines() if l.startswith("HEAVY:"))
    return [m for m in line[len("HEAVY:"):].split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "compile 1 spec": [*trainspec(), "compile", "specs/mnist-lightning.yaml", "-o", out],
            "compile 6 specs": [*trainspec(), "compile", "specs", "-o", out],
        }
        for argv in cases.values():  # warm-up: .pyc files, page cache
            timed(argv)
        samples = {name: [] for name in cases}
        for _ in range(args.runs):  # interleaved A B C A B C
            for name, argv in cases.items():
                samples[name].append(timed(argv))
        imported = heavy_imports(out)
    floor = statistics.median(samples["python -c pass"])
    rows = []
    print(f"{'case':<18}{'median ms':>10}{'min ms':>9}{'x floor':>9}")
    for name, values in samples.items():
        median = statistics.median(values)
        rows.append({"case": name, "median_s": median, "min_s": min(values), "runs": len(values)})
        print(f"{name:<18}{median * 1000:>10.1f}{min(values) * 1000:>9.1f}{median / floor:>9.1f}")
    print(f"heavy modules imported by compile: {', '.join(imported) or 'none'}")
    results = REPO / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "compile_cold_start.json").write_text(json.dumps(
        {"python": sys.version.split()[0], "rows": rows, "heavy_imports": imported}, indent=2) + "\n")


if __name__ == "__main__":
    main()
