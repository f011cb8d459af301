"""extends chains, --set and --var: merged before validation, and every error points at the
file (or the override) that wrote the value."""

import os
from pathlib import Path

import pytest

from conftest import cpu_bound, no_hang, REPO, ts
from trainspec.core.diagnostics import SpecError, error
from trainspec.schema.compose import compose

ROOT = f"""version: 1
name: base
code: {REPO}/examples/ddp
command: python train.py --steps {{{{ vars.steps }}}}
vars: {{steps: 10}}
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
environment:
  image: pytorch:latest
env:
  NCCL_DEBUG: WARN
  OMP_NUM_THREADS: "4"
targets:
  azureml: {{compute: gpu-cluster}}
"""




def three_deep(tmp_path: Path, middle_extra: str = "") -> Path:
    (tmp_path / "base").mkdir()
    (tmp_path / "team").mkdir()
    (tmp_path / "base" / "root.yaml").write_text(ROOT)
    (tmp_path / "team" / "middle.yaml").write_text(
        "extends: ../base/root.yaml\nname: middle\nresources:\n  nodes: 4\n" + middle_extra)
    leaf = tmp_path / "job.yaml"
    leaf.write_text("extends: team/middle.yaml\nname: leaf\nenv:\n  NCCL_DEBUG: INFO\n")
    return leaf


def test_three_deep_chain_merges_maps_and_replaces_scalars(tmp_path):
    leaf = three_deep(tmp_path)
    proc = ts("compile", leaf.name, "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = (tmp_path / "out" / "leaf" / "azureml" / "job.yml").read_text()
    assert "instance_count: 4" in job  # middle's nodes replaced the root's
    assert "instance_type" not in job and "compute: azureml:gpu-cluster" in job  # root's targets kept
    assert "NCCL_DEBUG: INFO" in job and 'OMP_NUM_THREADS: "4"' in job  # env maps merged
    assert "train.py --steps 10" in job  # root's vars


def test_a_target_set_to_null_leaves_the_bases_settings_and_is_not_compiled(tmp_path):
    """`targets.<target>: null` in a spec that extends a base removes that target's settings (and
    with them the target from what `compile` makes by default); the others stay (docs/spec.md)."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "root.yaml").write_text(ROOT + "  slurm: {partition: hpc}\n")
    leaf = tmp_path / "job.yaml"
    leaf.write_text("extends: base/root.yaml\nname: leaf\ntargets:\n  azureml: null\n")
    proc = ts("compile", leaf.name, "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "leaf").iterdir()) == ["slurm"]
    assert "#SBATCH --partition=hpc" in (tmp_path / "out" / "leaf" / "slurm" / "job.sbatch").read_text()
    # asked for by name, a target set to null compiles with its defaults: nothing of the base's is left
    proc = ts("compile", leaf.name, "-t", "azureml", "-o", "out2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "gpu-cluster" not in (tmp_path / "out2" / "leaf" / "azureml" / "job.yml").read_text()


def test_error_in_the_middle_file_is_reported_at_its_own_line(tmp_path):
    leaf = three_deep(tmp_path, middle_extra="  gpus_per_node: 16\n")
    proc = ts("validate", leaf.name, cwd=tmp_path)
    assert proc.returncode == 1
    assert "team/middle.yaml:5:18: error: resources.gpus_per_node: 16 GPUs per node, but Standard_ND96isr_H100_v5 " \
           "has 8" in proc.stderr, proc.stderr
    # an unknown key in the root is reported in the root
    (tmp_path / "base" / "root.yaml").write_text(ROOT.replace("  nodes: 2\n", "  nodez: 2\n"))
    proc = ts("validate", leaf.name, cwd=tmp_path)
    assert "base/root.yaml:7:3: error: resources.nodez: unknown key 'nodez'" in proc.stderr, proc.stderr


def test_cycles_are_errors_with_the_chain(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nversion: 1\n")
    (tmp_path / "b.yaml").write_text("version: 1\nextends: a.yaml\n")
    proc = ts("validate", "a.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "b.yaml:2:10: error: extends: extends forms a cycle:" in proc.stderr
    assert f"{tmp_path}/a.yaml -> {tmp_path}/b.yaml -> {tmp_path}/a.yaml" in proc.stderr


def test_missing_base(tmp_path):
    (tmp_path / "a.yaml").write_text("version: 1\nextends: nope.yaml\n")
    proc = ts("validate", "a.yaml", cwd=tmp_path)
    assert "a.yaml:2:10: error: extends: extended file 'nope.yaml' does not exist" in proc.stderr


def test_set_overrides_are_validated_and_named(tmp_path):
    leaf = three_deep(tmp_path)
    ok = ts("compile", leaf.name, "-o", "out", "--set", "resources.nodes=8", cwd=tmp_path)
    assert ok.returncode == 0 and "instance_count: 8" in (tmp_path / "out/leaf/azureml/job.yml").read_text()
    bad = ts("compile", leaf.name, "-o", "out2", "--set", "resources.nodes=two", cwd=tmp_path)
    assert bad.returncode == 1 and not (tmp_path / "out2").exists()
    assert "--set resources.nodes=two: error: resources.nodes: expected a valid integer, got 'two'" in bad.stderr
    typo = ts("validate", leaf.name, "--set", "resources.node=3", cwd=tmp_path)
    assert "--set resources.node=3: error: resources.node: unknown key 'node' (hint: did you mean 'nodes'?)" \
        in typo.stderr
    malformed = ts("validate", leaf.name, "--set", "resources.nodes", cwd=tmp_path)
    assert malformed.returncode == 1 and "--set resources.nodes: error: expected KEY=VALUE" in malformed.stderr


@pytest.mark.parametrize("override, problem", [
    ("resources.nodes.x=1", "resources.nodes: expected a valid integer, got a mapping"),  # the middle's line before
    ("env.NCCL_DEBUG.level=INFO", "env.NCCL_DEBUG: expected a valid string, got a mapping"),  # the leaf's
    ("targets.azureml.compute.name=x", "targets.azureml.compute: expected a valid string, got a mapping"),  # root's
    ("inputs.data.bogus=1", "inputs.data: an input needs a path (data) or a value (a literal)"),  # 1:1 before
])
def test_a_set_that_makes_a_mapping_is_where_its_errors_are(tmp_path, override, problem):
    """A --set below a value the files wrote (a scalar made a mapping) or below nothing (a new
    input): every error there is the override's, located at it, never at a line of a file."""
    leaf = three_deep(tmp_path)
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        proc = ts(*command, leaf.name, "--set", override, cwd=tmp_path)
        assert proc.returncode == 1 and not (tmp_path / "out").exists()
        errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
        assert f"--set {override}: error: {problem}" in proc.stderr, proc.stderr
        assert errors and all(line.startswith(f"--set {override}: error: ") for line in errors), proc.stderr


def test_vars_from_the_command_line(tmp_path):
    leaf = three_deep(tmp_path)
    proc = ts("compile", leaf.name, "-o", "out", "--var", "steps=99", cwd=tmp_path)
    assert proc.returncode == 0 and "train.py --steps 99" in (tmp_path / "out/leaf/azureml/job.yml").read_text()
    proc = ts("validate", leaf.name, "--set", "command=python train.py {{ vars.nope }}", cwd=tmp_path)
    assert "undefined template name: vars.nope (the spec's vars: steps)" in proc.stderr


# ---------------------------------------------------------------- hostile extends (issue 20)


@pytest.mark.parametrize("kind, message", [
    ("fifo", "'base.yaml' is a FIFO (named pipe), not a regular file"),
    ("/dev/stdin", "'/dev/stdin' names a device or a process's stream, not a file"),
    ("/dev/zero", "'/dev/zero' is a device, not a regular file"),
    ("folder", "'base.yaml' is a directory, not a spec file"),
    ("loop", "'base.yaml' is a symbolic link loop"),
    ("nul", "the path contains a NUL character"),
    ("long-part", "the path has a part of 300 bytes (a file name has at most 255)"),
    ("long-path", "bytes long (a path has at most 4095)"),
])
def test_extends_must_name_a_regular_file(tmp_path, kind, message):
    """Bugs: `extends:` naming a FIFO blocked forever; `/dev/stdin` was read as the base (an empty
    one, from a closed stdin); a loop ended in "internal error: RuntimeError", a NUL in
    "internal error: ValueError"; a long name was reported at the base's own 1:1, not at extends."""
    ref = {"/dev/stdin": "/dev/stdin", "/dev/zero": "/dev/zero", "nul": "a\\0b.yaml", "long-part": "x" * 300,
           "long-path": "/".join(["d" * 200] * 25) + "/base.yaml"}.get(kind, "base.yaml")
    if kind == "fifo":
        os.mkfifo(tmp_path / "base.yaml")
    elif kind == "folder":
        (tmp_path / "base.yaml").mkdir()
    elif kind == "loop":
        (tmp_path / "base.yaml").symlink_to("other.yaml")
        (tmp_path / "other.yaml").symlink_to("base.yaml")
    (tmp_path / "spec.yaml").write_text(f'version: 1\nextends: "{ref}"\nname: x\n')
    with no_hang(), pytest.raises(SpecError) as caught:
        compose(str(tmp_path / "spec.yaml"))
    [d] = caught.value.diagnostics
    assert (d.file, d.line, d.col, d.field) == (str(tmp_path / "spec.yaml"), 2, 10, "extends"), d
    assert message in d.message, d


def test_a_build_context_in_a_base_is_relative_to_the_base(tmp_path):
    """Bug: `environment.build.path: docker` in base/root.yaml was looked up next to the spec that
    extends it ("'docker' is not a folder"), while code and conda_file were rebased."""
    (tmp_path / "base" / "docker").mkdir(parents=True)
    (tmp_path / "base" / "docker" / "Dockerfile").write_text("FROM python:3.11\n")
    (tmp_path / "base" / "root.yaml").write_text(
        ROOT.replace("environment:\n  image: pytorch:latest\n", "environment:\n  build: {path: docker}\n"))
    (tmp_path / "job.yaml").write_text("extends: base/root.yaml\nname: leaf\n")
    proc = ts("compile", "job.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = (tmp_path / "out" / "leaf" / "azureml" / "job.yml").read_text()
    assert "path: ../../../base/docker" in job, job


# ---------------------------------------------------------------- linear time (issue 27)


def test_a_spec_holding_a_long_list_composes_in_linear_time(tmp_path):
    """Bug: a 40 KB spec with a 19,500-item list took 33 s of CPU in every command: each item of a
    replaced list scanned every path recorded so far (quadratic). Now about a second of parsing;
    the guard is CPU time far above it, and every item still knows its file and line."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: big\ntags: [" + ",".join(["1"] * 19_500) + "]\n")
    assert spec.stat().st_size < 40_000
    with cpu_bound(15):
        doc = compose(str(spec))
    assert len(doc.data["tags"]) == 19_500
    last = doc.locate(error(("tags", 19_499), "x"))
    assert (last.file, last.line, last.col) == (str(spec), 3, 8 + 2 * 19_499), last


def test_a_base_of_many_keys_overridden_key_by_key_composes_in_linear_time(tmp_path):
    """Each key a spec replaces forgets only the paths under the base's value there (its size),
    not a scan of every path of every file: 9,000 keys replaced in a chain of two."""
    keys = [f"k{i}" for i in range(9_000)]
    (tmp_path / "base.yaml").write_text("version: 1\nname: base\nenv:\n" + "".join(f"  {k}: [a]\n" for k in keys))
    (tmp_path / "spec.yaml").write_text("extends: base.yaml\nname: leaf\nenv:\n" + "".join(f"  {k}: c\n" for k in keys))
    with cpu_bound(15):
        doc = compose(str(tmp_path / "spec.yaml"))
    assert doc.data["env"]["k8999"] == "c"
    # the leaf wrote it: its line there, and nothing of the base's list is left claiming a place
    found = doc.locate(error(("env", "k8999"), "x"))
    assert (Path(found.file).name, found.line) == ("spec.yaml", 9_003), found
    assert ("env", "k8999", 0) not in doc.origins


@pytest.mark.parametrize("value", ["[" * 100_000, "{a: " * 20_000, "- " * 10_000 + "x"], ids=["flow-lists", "flow-maps", "block-lists"])
def test_a_deeply_nested_override_is_a_located_error_before_it_costs_seconds(tmp_path, value):
    """Bug: `--set a=[[[...` ended in "internal error: RecursionError" (exit 70) after seconds of
    ruamel's scanning; now the override is named, at the bracket too deep or the recursion."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: x\n")
    with cpu_bound(5), pytest.raises(SpecError) as caught:
        compose(str(spec), sets=[f"vars.a={value}"])
    (d,) = caught.value.diagnostics
    assert d.message == "the value is nested too deeply (limit 40 levels)", d
    assert d.file.startswith("--set vars.a=") and d.file.endswith("...") and len(d.file) < 120, d


def test_a_deeply_nested_override_exits_1_not_70(tmp_path):
    (tmp_path / "spec.yaml").write_text("version: 1\nname: x\n")
    proc = ts("validate", "spec.yaml", "--set", "a=" + "[" * 5_000, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert "error: the value is nested too deeply (limit 40 levels)" in proc.stderr


# ---------------------------------------------------------------- paths in diagnostics (issue 30)

H100_BASE = """version: 1
name: base
code: .
command: python train.py
resources:
  nodes: 2
  gpus_per_node: 16
  sku: Standard_ND96isr_H100_v5
"""


def test_a_base_is_named_by_its_normalised_path(tmp_path):
    """Bug: a base reached by `extends: ../bases/h100.yaml` was named `specs/../bases/h100.yaml:7:18`
    in every format. Now the path as normpath folds it, relative to the cwd like the spec's own."""
    import json

    (tmp_path / "bases").mkdir()
    (tmp_path / "specs").mkdir()
    (tmp_path / "bases" / "h100.yaml").write_text(H100_BASE)
    (tmp_path / "specs" / "job.yaml").write_text("extends: ../bases/h100.yaml\nname: job\n")
    where = "bases/h100.yaml:7:18"
    text = ts("validate", "specs/job.yaml", cwd=tmp_path)
    assert text.returncode == 1 and f"\n{where}: error: resources.gpus_per_node: 16 GPUs" in "\n" + text.stderr, \
        text.stderr
    assert ".." not in text.stderr, text.stderr
    # named the long way round on the command line, the spec (and its base) still read plainly
    dotted = ts("validate", "./specs/../specs/job.yaml", "--set", "resources.nodes=3", cwd=tmp_path)
    assert dotted.stderr.startswith(f"{where}: error:") and ".." not in dotted.stderr, dotted.stderr
    github = ts("validate", "specs/job.yaml", "--format", "github", cwd=tmp_path)
    assert "::error file=bases/h100.yaml,line=7,col=18,title=resources.gpus_per_node::16 GPUs" in github.stdout, \
        github.stdout
    found = json.loads(ts("validate", "specs/job.yaml", "--format", "json", cwd=tmp_path).stdout)
    assert [(d["file"], d["line"], d["col"]) for d in found if d["severity"] == "error"] == \
        [("bases/h100.yaml", 7, 18)], found
    # a chain of two: the middle file and the root each named plainly
    (tmp_path / "specs" / "team").mkdir()
    (tmp_path / "specs" / "team" / "mid.yaml").write_text("extends: ../../bases/h100.yaml\nresources:\n  nodez: 2\n")
    (tmp_path / "specs" / "job.yaml").write_text("extends: ./team/mid.yaml\nname: job\n")
    chain = ts("validate", "specs/job.yaml", cwd=tmp_path)
    assert "specs/team/mid.yaml:3:3: error: resources.nodez: unknown key" in chain.stderr, chain.stderr
    assert ".." not in chain.stderr and "/./" not in chain.stderr, chain.stderr


def test_a_missing_code_folder_is_named_by_its_normalised_path(tmp_path):
    """`code: ../nope` in specs/job.yaml: the message said where it looked as
    `.../specs/../nope`; now as normpath folds it, the way every diagnostic names a path."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "job.yaml").write_text(
        "version: 1\nname: job\ncode: ../nope\ncommand: python train.py\nenvironment: {image: pytorch:latest}\n")
    proc = ts("validate", "specs/job.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"specs/job.yaml:3:7: error: code: '../nope' does not exist (resolved against the spec's directory: " \
           f"{tmp_path}/nope)" in proc.stderr, proc.stderr
    assert "/../" not in proc.stderr.replace("'../nope'", ""), proc.stderr


def test_a_base_reached_through_a_linked_folder_keeps_the_path_that_names_it(tmp_path):
    """No link is resolved: `bases` linked to a shared folder is still `bases/h100.yaml`; and
    `linked/..` (the parent of the link's *target*, for the file system) is never folded into a
    path that names another file."""
    (tmp_path / "shared" / "bases").mkdir(parents=True)
    (tmp_path / "shared" / "bases" / "h100.yaml").write_text(H100_BASE)
    (tmp_path / "bases").symlink_to("shared/bases")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "job.yaml").write_text("extends: ../bases/h100.yaml\nname: job\n")
    proc = ts("validate", "specs/job.yaml", cwd=tmp_path)
    assert proc.stderr.startswith("bases/h100.yaml:7:18: error: resources.gpus_per_node:"), proc.stderr
    # specs/linked -> ../team/jobs: `../base.yaml` from there is team/base.yaml, not specs/base.yaml
    (tmp_path / "team" / "jobs").mkdir(parents=True)
    (tmp_path / "team" / "base.yaml").write_text(H100_BASE)
    (tmp_path / "team" / "jobs" / "job.yaml").write_text("extends: ../base.yaml\nname: job\n")
    (tmp_path / "specs" / "linked").symlink_to("../team/jobs")
    (tmp_path / "specs" / "base.yaml").write_text("version: 1\n")  # the file a folded path would name
    proc = ts("validate", "specs/linked/job.yaml", cwd=tmp_path)
    assert proc.stderr.startswith("specs/linked/../base.yaml:7:18: error: resources.gpus_per_node:"), proc.stderr
