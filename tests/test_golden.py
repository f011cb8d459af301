"""Golden files: the compiled output of every example spec, reviewed by eye as diffs.

Regenerate after an intended change with:   trainspec compile specs/ -o tests/golden
(the shim copies it writes there are git-ignored; test_runtime_* covers the shim)."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SPECS, trainspec_cmd
from trainspec.registry.build import build
from trainspec.runtime import shim_source

GOLDEN = REPO / "tests" / "golden"
SPEC_FILES = sorted(SPECS.glob("*.yaml"))
REGENERATE = "trainspec compile specs/ -o tests/golden"
# runtime files copied byte for byte next to the jobs: compared with their source below instead
# the runtime files a job ships as they are (the shim: joined for its target, runtime.shim_source)
VERBATIM = {"trainspec_shim.py": "shim.py", "trainspec_ray_driver.py": "ray_driver.py", "trainspec_procs.py": "procs.py",
            "trainspec_ray_request.py": "ray_request.py", "trainspec_hpcpack_election.py": "hpcpack_election.py",
            "trainspec_secret_refs.py": "secret_refs.py"}


@pytest.mark.parametrize("spec", SPEC_FILES, ids=lambda p: p.stem)
def test_output_matches_golden(spec, monkeypatch):
    monkeypatch.chdir(REPO)
    outcome = build(str(spec.relative_to(REPO)), Path("tests/golden"))
    assert outcome.ok, [d.render() for d in outcome.diagnostics]
    for artifact in outcome.artifacts:
        for item in artifact.files:
            if item.path in VERBATIM:
                continue
            golden = GOLDEN / artifact.name / artifact.target / item.path
            assert golden.exists(), f"no golden file {golden}; run: {REGENERATE}"
            assert item.data.decode() == golden.read_text(), f"{golden} is stale; review and run: {REGENERATE}"


def test_every_golden_file_has_a_spec():
    names = {p.stem for p in SPEC_FILES}
    assert {p.name for p in GOLDEN.iterdir() if p.is_dir()} == names


def _compile(cwd: Path, out: str, seed: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    subprocess.run([*trainspec_cmd(), "compile", "specs", "-o", out], cwd=cwd, env=env, check=True,
                   capture_output=True, timeout=300)
    root = cwd / out
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_byte_identical_across_runs_and_directories(tmp_path):
    """Same spec -> same bytes: in two checkouts at different places, with different hash seeds."""
    import shutil

    copies = []
    for name in ("one", "two/nested"):
        dest = tmp_path / name / "repo"
        shutil.copytree(REPO / "specs", dest / "specs")
        shutil.copytree(REPO / "bases", dest / "bases")  # what specs/ddp-on-base.yaml extends
        shutil.copytree(REPO / "examples", dest / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        (dest / ".git").mkdir()  # the spec path in headers is relative to the repository root
        copies.append(dest)
    first = _compile(copies[0], "build", "1")
    second = _compile(copies[1], "build", "2")
    again = _compile(copies[0], "build", "3")
    assert first.keys() == second.keys() and first
    for key in first:
        assert first[key] == second[key] == again[key], key
    assert not any(str(tmp_path).encode() in data for data in first.values()), "absolute path in output"


def test_runtime_files_travel_verbatim(tmp_path):
    out = tmp_path / "build"
    subprocess.run([*trainspec_cmd(), "compile", str(SPECS), "-o", str(out)], check=True, capture_output=True,
                   timeout=300)
    copies = list(out.rglob("trainspec_*.py"))
    assert {p.name for p in copies} == set(VERBATIM)
    for copy in copies:
        if copy.name == "trainspec_shim.py":  # joined for the job's target (out/<name>/<target>/): its detectors only
            assert copy.read_text() == shim_source(copy.parent.name)
            continue
        assert copy.read_bytes() == (REPO / "trainspec" / "runtime" / VERBATIM[copy.name]).read_bytes()
