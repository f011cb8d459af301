"""Loading is linear in the spec's size: CPU time at n and at 4n, and their ratio (~4 when linear,
~16 when quadratic).

    python benchmarks/load_size.py [--runs 3]

In one process (CPU time, `time.process_time`: the same on a busy machine), through
`trainspec.schema.compose.compose`, what every command does first:

- a list of n items (the issue's 40 KB spec holds 19,500: it took 33 s when each replaced item
  scanned every recorded path);
- a base of n keys that a spec extending it replaces key by key;
- n `{` (refused at the 41st: the time must not grow with n at all; it took 7 s at 10,000);
- beside them, ruamel.yaml's round-trip load of the same list (the floor: the parser itself).

Times are medians; nothing is asserted (the suite holds the same cases under a CPU-time guard:
tests/test_compose.py, tests/test_loader.py). Writes benchmarks/results/load_size.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from trainspec.core.diagnostics import SpecError  # noqa: E402
from trainspec.schema.compose import compose  # noqa: E402


def cpu_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def refused(file: Path):
    def load():
        try:
            compose(str(file))
        except SpecError:
            return
        raise AssertionError(f"{file} was not refused")
    return load


def cases(tmp: Path, n: int):
    """(name, what is timed) for size n."""
    listed = tmp / f"list{n}.yaml"
    listed.write_text("version: 1\nname: big\ntags: [" + ",".join(["1"] * n) + "]\n")
    (tmp / f"base{n}.yaml").write_text("version: 1\nname: base\nenv:\n" + "".join(f"  k{i}: a\n" for i in range(n)))
    leaf = tmp / f"leaf{n}.yaml"
    leaf.write_text(f"extends: base{n}.yaml\nname: leaf\nenv:\n" + "".join(f"  k{i}: c\n" for i in range(n)))
    deep = tmp / f"deep{n}.yaml"
    deep.write_text("x: " + "{" * n + "\n")
    text = listed.read_text()

    def ruamel_floor():
        from ruamel.yaml import YAML

        YAML(typ="rt").load(text)

    return [(f"a list of n items ({listed.stat().st_size // 1024} KB at n)", lambda: compose(str(listed))),
            ("n keys of a base, replaced by the spec", lambda: compose(str(leaf))),
            ("n '{' (refused at the 41st)", refused(deep)),
            ("floor: ruamel.yaml round-trip load of the list", ruamel_floor)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-n", type=int, default=4_875, help="the small size; the large one is 4n (19,500)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        small, large = cases(tmp, args.n), cases(tmp, 4 * args.n)
        print(f"{'case':<52} {'n s':>8} {'4n s':>8} {'ratio':>6}")
        for (name, at_n), (_, at_4n) in zip(small, large):
            a, b = cpu_seconds(at_n, args.runs), cpu_seconds(at_4n, args.runs)
            ratio = b / a if a > 0 else float("nan")
            results.append({"case": name, "n": args.n, "n_s": a, "4n_s": b, "ratio": ratio})
            print(f"{name:<52} {a:>8.3f} {b:>8.3f} {ratio:>6.1f}")
    out = REPO / "benchmarks" / "results" / "load_size.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
