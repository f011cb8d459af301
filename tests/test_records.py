"""core/records.py: the plain classes that replaced dataclasses on the start-up path keep what
the dataclasses gave: equality by type and fields, a hash of the fields, a repr naming them,
replace() through the class's own __init__, and a pickle (a worker process may hand them back)."""

import pickle

import pytest

from conftest import SPECS
from trainspec.registry.build import Outcome, build
from trainspec.compiler.base import Artifact, OutFile
from trainspec.core.diagnostics import ERROR, Diagnostic
from trainspec.core.records import replace
from trainspec.schema.skus import Sku


def test_equal_by_type_and_fields_hashable_and_shown_field_by_field():
    a = OutFile("job.yml", b"x\n")
    assert a == OutFile("job.yml", b"x\n", False, None, (), None)
    assert a != OutFile("job.yml", b"y\n") and a != Artifact("t", "n", (a,), "s")
    assert len({a, OutFile("job.yml", b"x\n"), OutFile("b", b"")}) == 2
    assert repr(a) == "OutFile(path='job.yml', data=b'x\\n', executable=False, runtime=None, embedded=(), shown=None)"
    with pytest.raises(TypeError):
        hash(Outcome("spec.yaml"))  # filled in as it goes, as the mutable dataclass was: no hash


def test_replace_goes_through_init_and_names_an_unknown_field():
    sku = Sku("Standard_A", 0, None, 0, 2, 4.0, False, "A")
    assert replace(sku, vcpus=4) == Sku("Standard_A", 0, None, 0, 4, 4.0, False, "A")
    assert sku.vcpus == 2  # a copy
    with pytest.raises(TypeError, match="Sku has no field cpus"):
        replace(sku, cpus=4)
    # __init__ runs again: what looks like a credential is redacted in the copy too
    secret = "ghp_" + "a" * 36
    moved = replace(Diagnostic(ERROR, ("env",), "bad"), message=f"token {secret}")
    assert secret not in moved.message and moved.path == ("env",)


def test_artifacts_and_diagnostics_pickle_to_equal_ones(tmp_path):
    outcome = build(str(SPECS / "ray-lightning.yaml"), tmp_path)
    assert outcome.ok and outcome.artifacts
    parts = (outcome.artifacts, outcome.diagnostics, outcome.valid.sku, outcome.valid.source)
    assert pickle.loads(pickle.dumps(parts)) == parts
