"""Validation time against the size of the command: linear, near the time to read the spec.

    python benchmarks/command_size.py [--runs 3]

Two tables. (1) `trainspec validate` as a whole process on specs whose command is one long word
of 10 kB to ~1 MB (a spec file is at most 1 MiB), beside the floor: a process that only reads
and parses the same file with ruamel.yaml. (2) In one process, the command-line splitter
validation uses (trainspec.core.fields.split_command) beside shlex.split, which it replaced:
shlex grows a word one character at a time, quadratic in its length (1 MB took ~16 s). Up to
10 MB, as a template could render (a template's output is capped at 1 MiB, so that size is
reached by no spec). Times are medians; nothing is asserted. Writes
benchmarks/results/command_size.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from trainspec.core.fields import split_command  # noqa: E402

SPEC = """version: 1
name: big
code: code
framework: lightning
command: python t.py --devices 1 --data {word}
resources: {{gpus_per_node: 0}}
environment: {{image: python:3.11}}
targets: {{azureml: {{compute: cpu-cluster}}}}
"""
FLOOR = "import sys; from ruamel.yaml import YAML; YAML(typ='rt').load(open(sys.argv[1]).read())"


def median_seconds(argv, runs):
    times = []
    for _ in range(runs + 1):  # the first is a warm-up
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def in_process(split, text, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        split(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trainspec = [sys.executable, "-m", "trainspec.cli"]
    results = {"validate": [], "split": []}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "code").mkdir()
        print(f"{'command bytes':>14} {'validate s':>11} {'read+parse s':>13}")
        for size in (10_000, 100_000, 1_000_000):
            spec = Path(tmp) / f"big{size}.yaml"
            spec.write_text(SPEC.format(word="a" * size))
            validate = median_seconds([*trainspec, "validate", str(spec)], args.runs)
            floor = median_seconds([sys.executable, "-c", FLOOR, str(spec)], args.runs)
            results["validate"].append({"bytes": size, "validate_s": validate, "read_parse_s": floor})
            print(f"{size:>14,} {validate:>11.3f} {floor:>13.3f}")
    print(f"\n{'word bytes':>14} {'split_command s':>16} {'shlex.split s':>14}")
    for size in (10_000, 100_000, 1_000_000, 10_000_000):
        text = "python t.py " + "a" * size + "''"  # one long word, with quotes (no fast path)
        ours = in_process(split_command, text, args.runs)
        theirs = in_process(shlex.split, text, 1) if size <= 1_000_000 else None  # 10 MB: about half an hour
        results["split"].append({"bytes": size, "split_command_s": ours, "shlex_split_s": theirs})
        shown = "skipped" if theirs is None else f"{theirs:.4f}"
        print(f"{size:>14,} {ours:>16.4f} {shown:>14}")
    out = REPO / "benchmarks" / "results" / "command_size.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
