"""The shim a job ships (issue 42): the core joined with the shared parts and its platform's
detectors only, one stdlib-only file, the same bytes at every join."""

import ast
import subprocess
import sys

import pytest

import shim_files
from trainspec.runtime import DETECTORS, SHIM_PARTS, SHIM_PATH, shim_platforms, shim_source
from trainspec.registry import TARGETS

# each platform's detectors, by name, as its documentation's variables are read (docs/runtime.md)
PLATFORMS = {
    "azureml": ["azureml-mpi", "azureml-pytorch", "tensorflow"],
    "hpcpack": ["hpcpack"],
    "kubernetes": ["kubeflow-pytorchjob", "kubeflow-trainjob"],
    "ray": ["ray"],
    "slurm": ["slurm"],
}


def test_every_target_has_its_detectors_and_the_package_holds_them_all():
    assert shim_platforms() == tuple(sorted(TARGETS)) == tuple(sorted(PLATFORMS))
    assert sorted(d.name for d in DETECTORS) == sorted(
        ["torchelastic", "env", "single-process", *(name for names in PLATFORMS.values() for name in names)])


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_a_jobs_shim_holds_its_platforms_detectors_between_torchs_own_and_no_other(platform):
    shim = shim_files.load(platform)
    assert [d.name for d in shim.DETECTORS] == ["torchelastic", *PLATFORMS[platform], "env", "single-process"]
    source = shim_source(platform)
    others = [name for other in PLATFORMS if other != platform
              for name in ast.parse((SHIM_PATH.parent / f"{other}_detector.py").read_text()).body
              if isinstance(name, ast.ClassDef) and f"class {name.name}(" in source]
    assert others == []


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_the_join_is_deterministic_and_imports_the_standard_library_only(platform):
    source = shim_source(platform)
    assert shim_source(platform) == source
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, ast.dump(node)
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(
        sys.stdlib_module_names)
    assert "# package only" not in source.replace("``# package only``", "")  # every marked import dropped
    for part in ("shim.py", *SHIM_PARTS, f"{platform}_detector.py"):  # in order, each named once
        assert source.count(f" runtime/{part}\n") == (part != "shim.py")
    assert source.rstrip().endswith("sys.exit(main())")


def test_an_unknown_platform_is_refused_and_a_joined_shim_runs_alone(tmp_path):
    """A platform without detectors is an error; a joined file runs by itself, as a job starts it."""
    with pytest.raises(ValueError, match="no shim detectors for platform 'lsf'; expected one of azureml, "):
        shim_source("lsf")
    shipped = shim_files.ship("slurm", tmp_path)
    env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "42"}
    done = subprocess.run([sys.executable, "-I", "-S", str(shipped), "--print"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=n1", "MASTER_PORT=15042"} <= set(done.stdout.splitlines())
