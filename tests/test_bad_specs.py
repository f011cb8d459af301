"""The corpus of bad specs: each file under tests/bad_specs/ states, in `# expect:` lines,
the exact line:col, severity and message (prefix) that `trainspec validate` must print."""

import re
import subprocess
from pathlib import Path

import pytest

from conftest import trainspec_cmd, ts

CORPUS = sorted((Path(__file__).parent / "bad_specs").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (error|warning) (\d+):(\d+) (.*)$")


def expectations(path: Path):
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = EXPECT.match(line)
        if m:
            out.append(m.groups())
    assert out, f"{path.name} has no '# expect:' line"
    return out


@pytest.mark.parametrize("spec", CORPUS, ids=lambda p: p.stem)
def test_bad_spec_reports_position_and_message(spec, cli_env):
    proc = subprocess.run([*trainspec_cmd(), "validate", spec.name], cwd=spec.parent, env=cli_env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    for severity, line, col, message in expectations(spec):
        prefix = f"{spec.name}:{line}:{col}: {severity}: {message}"
        assert any(l.startswith(prefix) for l in lines), f"expected a line starting with\n  {prefix}\ngot\n" + proc.stderr
    has_error = any(s == "error" for s, *_ in expectations(spec))
    assert proc.returncode == (1 if has_error else 0), proc.stderr
    if not has_error:
        strict = subprocess.run([*trainspec_cmd(), "validate", "--strict", spec.name], cwd=spec.parent,
                                env=cli_env, capture_output=True, text=True, timeout=300)
        assert strict.returncode == 1


# ---------------------------------------------------------------- structure and meaning in one run (issue 30)

EIGHT = """\
version: 1
name: eight
code: .
command: python train.py --trainer.num_nodes 4
framework: lightning
colour: blue
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
  gpus_per_node: 16
  spot: perhaps
env:
  MASTER_ADDR: x
  RETRIES: [1, 2]
  RUN_NAME: "{{ vars.nope }}"
targets:
  slurm: {partition: gpu, walltime: 5}
"""


def test_every_mistake_of_a_file_in_one_run_structure_and_meaning(tmp_path):
    """Bug: a structure error stopped the meaning checks, so this file reported its four structure
    mistakes, and the other four only after those were fixed. Now all eight, each at its line."""
    (tmp_path / "eight.yaml").write_text(EIGHT)
    proc = ts("validate", "eight.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    found = [line.split(": error: ")[0] + " " + line.split(": error: ")[1].split(":")[0]
             for line in proc.stderr.splitlines() if ": error: " in line]
    assert found == [
        "eight.yaml:4:10 command",  # meaning: the Lightning trap (num_nodes 4, resources.nodes 2)
        "eight.yaml:6:1 colour",  # structure: an unknown key
        "eight.yaml:10:18 resources.gpus_per_node",  # meaning: 16 GPUs on an 8-GPU size
        "eight.yaml:11:9 resources.spot",  # structure: not a boolean
        "eight.yaml:13:3 env.MASTER_ADDR",  # meaning: the shim's own variable
        "eight.yaml:14:12 env.RETRIES",  # structure: a list, not a string
        "eight.yaml:15:13 env.RUN_NAME",  # meaning: a template naming no var
        "eight.yaml:17:27 targets.slurm.walltime",  # structure: an unknown key
    ], proc.stderr
    assert proc.stderr.rstrip().endswith("1 spec: 8 errors, 0 warnings"), proc.stderr
    assert "Lightning num_nodes=4 but resources.nodes gives 2" in proc.stderr
    assert "16 GPUs per node, but Standard_ND96isr_H100_v5 has 8" in proc.stderr


def test_meaning_is_checked_beside_a_broken_field(tmp_path):
    """A check runs on the fields that are valid; one that reads a broken field is skipped rather
    than run on the default that stands in for it (no invented second error at that field)."""
    spec = tmp_path / "spec.yaml"
    # nodes is broken; the GPU count beside it is still checked against the size
    spec.write_text("version: 1\nname: x\ncode: .\ncommand: python t.py\nresources:\n  nodes: two\n"
                    "  sku: Standard_ND96isr_H100_v5\n  gpus_per_node: 16\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path)
    assert "spec.yaml:6:10: error: resources.nodes: expected a valid integer" in proc.stderr, proc.stderr
    assert "spec.yaml:8:18: error: resources.gpus_per_node: 16 GPUs per node" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("2 errors, 0 warnings"), proc.stderr
    # the size is broken: no "neither sku nor gpus_per_node is set" (the sku was written), and
    # what does not read the size is still checked
    spec.write_text("version: 1\nname: x\ncode: .\ncommand: python t.py {{ vars.nope }}\nresources:\n"
                    "  sku: [Standard_ND96isr_H100_v5]\nenv:\n  RANK: '0'\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path)
    assert "spec.yaml:6:8: error: resources.sku: expected a valid string, got a list" in proc.stderr, proc.stderr
    assert "spec.yaml:4:10: error: command: undefined template name: vars.nope" in proc.stderr, proc.stderr
    assert "spec.yaml:8:3: error: env.RANK: RANK is set by the trainspec shim" in proc.stderr, proc.stderr
    assert "cannot be known" not in proc.stderr and proc.stderr.rstrip().endswith("3 errors, 0 warnings"), \
        proc.stderr
    # a broken var: the templates (which may name it) wait; a broken required field gets no second word
    spec.write_text("version: 1\nname: Bad Name\ncode: [.]\ncommand: python t.py {{ vars.a }}\nvars:\n"
                    "  a: {b: 1}\nresources: {gpus_per_node: 0, procs_per_node: 2, spot: 3}\n"
                    "distribution: {backend: nccl}\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path)
    lines = [l.split(": error: ")[1].split(":")[0] for l in proc.stderr.splitlines() if ": error: " in l]
    assert lines == ["name", "code", "vars.a", "resources.spot", "distribution.backend"], proc.stderr
    assert "nccl needs GPUs" in proc.stderr and "undefined" not in proc.stderr, proc.stderr
