"""The snapshot validator (trainspec/schema/structure.py) against pydantic's own, on the same data.

compile checks a spec's structure with pydantic-core fed a stored copy of the core schema
pydantic generates from model.py (no pydantic import: ~70 ms less per start). These tests
hold it to pydantic: the stored copy is current, and for the example specs, the bad-spec
corpus and every field of every example replaced by values of other types, both give the
same errors (type, place, message) or the same validated values and the same set fields.
"""

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pydantic_core
import pytest

from conftest import REPO, SPECS
from trainspec.schema import structure
from trainspec.schema.loader import load_file
from trainspec.schema.model import Spec

# values of every YAML type, a few of them of the right type for some field
REPLACEMENTS = [None, True, 0, -1, 7, 2.5, "", "x", "2d", "Standard_ND96isr_H100_v5", [], ["a"], {}, {"k": 1}]


def _data(path: Path) -> Any:
    try:
        return load_file(str(path)).data
    except Exception:  # a corpus file the loader itself rejects never reaches validation
        return None


def _leaves(data: Any, path: Tuple = ()) -> Iterator[Tuple]:
    if isinstance(data, dict):
        yield path
        for key, value in data.items():
            yield from _leaves(value, path + (key,))
    else:
        yield path


def _replaced(data: Any, path: Tuple, value: Any) -> Any:
    out = copy.deepcopy(data)
    holder = out
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return out


def _errors(exc: pydantic_core.ValidationError) -> List[dict]:
    # ctx holds exception objects (ValueError(...)), equal only by identity: compare their text
    return [dict(e, ctx={k: str(v) for k, v in e.get("ctx", {}).items()}) for e in exc.errors(include_url=False)]


def _pydantic(data: Any):
    try:
        return "ok", Spec.model_validate(data)
    except pydantic_core.ValidationError as exc:
        return "error", _errors(exc)


def _snapshot(data: Any):
    try:
        return "ok", structure.parse(data)
    except pydantic_core.ValidationError as exc:
        return "error", _errors(exc)


def _everything(value: Any) -> Any:
    """A Record tree as plain data, every field (pydantic's model_dump without exclude_unset)."""
    if isinstance(value, structure.Record):
        return {k: _everything(v) for k, v in value.__dict__.items()}
    if isinstance(value, dict):
        return {k: _everything(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_everything(v) for v in value]
    return value


def _assert_agree(data: Any) -> str:
    want, got = _pydantic(data), _snapshot(data)
    assert got[0] == want[0], (data, want, got)
    if want[0] == "error":
        assert got[1] == want[1], data
    else:
        assert _everything(got[1]) == want[1].model_dump(), data
        assert structure.written(got[1]) == want[1].model_dump(exclude_unset=True), data
    return want[0]


def _cases() -> List[Any]:
    cases = []
    examples = [d for d in (_data(p) for p in sorted(SPECS.glob("*.yaml"))) if isinstance(d, dict)]
    assert len(examples) >= 8
    corpus = [_data(p) for p in sorted((REPO / "tests" / "bad_specs").glob("*.yaml"))]
    cases += examples + [d for d in corpus if d is not None]
    for data in examples:
        for path in _leaves(data):
            if not path:
                continue
            cases += [_replaced(data, path, value) for value in REPLACEMENTS]
            parent = path[:-1]
            cases.append(_replaced(data, parent + ("unknwon",), 1) if parent else dict(data, unknwon=1))
    return cases


def test_snapshot_is_what_pydantic_generates_now():
    stored = json.loads(structure.SNAPSHOT.read_text())
    _skip_unless_compatible(stored["pydantic_core"])
    now = structure.take()
    assert {**now, "pydantic_core": None} == {**stored, "pydantic_core": None}, \
        "stale: run python docs/gen_structure.py"


def _skip_unless_compatible(taken_with: str) -> None:
    if not structure.compatible(taken_with):
        pytest.skip(f"the snapshot was taken with pydantic-core {taken_with}, this is another release, "
                    f"{pydantic_core.__version__}: validation rebuilds it from model.py (the agreement tests "
                    "still run); refresh it with python docs/gen_structure.py")


def test_a_snapshot_serves_its_pydantic_core_release_not_another():
    assert structure.compatible("2.50.4", "2.50.5") and structure.compatible("2.50.4", "2.50.4")
    assert not structure.compatible("2.50.4", "2.51.0") and not structure.compatible("2.50.4", "3.50.4")


def test_snapshot_and_pydantic_agree_on_examples_corpus_and_every_field_mistyped():
    outcomes = [_assert_agree(data) for data in _cases()]
    assert len(outcomes) > 1000
    assert outcomes.count("ok") > 50 and outcomes.count("error") > 500  # both paths are exercised


def test_defaults_are_filled_and_not_counted_as_written():
    spec = structure.parse({"version": 1, "name": "a", "code": ".", "command": "python t.py",
                            "resources": {"nodes": 2}, "targets": {"azureml": {"timeout": "2d"}}})
    assert spec.resources.nodes == 2 and spec.resources.spot is False
    assert spec.distribution.master_port == 6105 and spec.targets.azureml.timeout == 2 * 86400
    assert spec.targets.hpcpack is None and spec.env == {}
    assert structure.written(spec) == {"version": 1, "name": "a", "code": ".", "command": "python t.py",
                                       "resources": {"nodes": 2}, "targets": {"azureml": {"timeout": 172800}}}


def test_a_validated_spec_is_read_only():
    spec = structure.parse({"version": 1, "name": "a", "code": ".", "command": "c"})
    with pytest.raises(AttributeError, match="read-only"):
        spec.name = "b"
    with pytest.raises(AttributeError, match="read-only"):
        spec.resources.nodes = 3


def test_compile_never_imports_pydantic_and_a_bad_spec_still_gets_its_hints(tmp_path):
    """pydantic is for errors (did-you-mean from the models) and `trainspec schema`, not for compiling."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: a\ncode: .\ncommand: c\nresources: {nodez: 2}\n")
    _skip_unless_compatible(json.loads(structure.SNAPSHOT.read_text())["pydantic_core"])
    code = ("import sys; from trainspec.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    print('EXIT:%s' % e.code)\n"
            "print('PYDANTIC:%s' % ('pydantic' in sys.modules))")
    good = subprocess.run([sys.executable, "-c", code, "compile", "specs", "-o", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "PYDANTIC:False" in good.stdout and good.stdout.count("EXIT:0") == 1, good.stdout + good.stderr
    wrong = subprocess.run([sys.executable, "-c", code, "validate", str(bad)], cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert "EXIT:1" in wrong.stdout
    assert "bad.yaml:5:13: error: resources.nodez: unknown key 'nodez' (hint: did you mean 'nodes'?)" in wrong.stderr


def test_compile_loads_pydantic_cores_compiled_module_without_its_package():
    """Issue 30: `import pydantic_core` builds core_schema's typed dicts (~40 ms of every start);
    the stored schema needs only the compiled module. A later import of pydantic (hints for a bad
    spec, `trainspec schema`) finds that same module: one ValidationError class, models work."""
    code = ("import sys; from trainspec.cli import main\n"
            "try:\n    main(['compile', 'specs/mnist-lightning.yaml', '-o', sys.argv[1]])\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'typing_extensions'))))\n"
            "from trainspec.schema import structure\n"
            "import pydantic, pydantic_core\n"
            "class M(pydantic.BaseModel):\n    n: int\n"
            "try:\n    M(n='x')\nexcept structure.ValidationError as exc:\n    print('caught', exc.error_count())\n"
            "print(pydantic_core.SchemaValidator is structure._core.SchemaValidator)\n")
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", code, out], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-3:] == ["['pydantic_core._pydantic_core']", "caught 1", "True"], proc.stdout
