"""The committed JSON Schema for editors is what `trainspec schema` prints, and documents every
field with a description and an example."""

import json
import subprocess

from conftest import REPO, SPECS, trainspec_cmd

SCHEMA = REPO / "schema" / "trainspec.schema.json"
BASE_SCHEMA = REPO / "schema" / "trainspec.base.schema.json"


def test_committed_schema_is_current():
    printed = subprocess.run([*trainspec_cmd(), "schema"], capture_output=True, text=True, check=True).stdout
    assert SCHEMA.read_text() == printed, "schema/trainspec.schema.json is stale: run trainspec schema > " \
                                          "schema/trainspec.schema.json"
    printed = subprocess.run([*trainspec_cmd(), "schema", "--base"], capture_output=True, text=True,
                             check=True).stdout
    assert BASE_SCHEMA.read_text() == printed, "schema/trainspec.base.schema.json is stale: run trainspec schema " \
                                               "--base > schema/trainspec.base.schema.json"


def _fields(schema):
    for name, model in [("Spec", schema), *schema.get("$defs", {}).items()]:
        for field, prop in model.get("properties", {}).items():
            yield f"{name}.{field}", prop


def test_every_field_has_a_description_and_an_example():
    schema = json.loads(SCHEMA.read_text())
    missing = [name for name, prop in _fields(schema) if not prop.get("description") or "examples" not in prop]
    assert missing == []


def test_example_specs_point_editors_at_the_schema():
    for spec in SPECS.glob("*.yaml"):
        assert spec.read_text().startswith("# yaml-language-server: $schema=../schema/trainspec.schema.json\n"), spec


# --- the schema against a real JSON Schema validator (Draft 2020-12) -------------------------------

jsonschema = __import__("pytest").importorskip("jsonschema", reason="jsonschema is in the test extra")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402

from test_properties import valid_specs  # noqa: E402


def _validator():
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(data):
    return sorted((list(e.absolute_path), e.message) for e in _validator().iter_errors(data))


def _where(data):
    """Where the error an editor underlines is: the deepest of the best match."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    return list(error.absolute_path), error.message


def _load(path):
    return YAML(typ="rt").load(path.read_text())  # as trainspec reads it (YAML 1.2)


def test_schema_accepts_every_example_and_test_spec():
    specs = sorted([*SPECS.glob("*.yaml"), *(REPO / "tests" / "specs").glob("*.yaml")])
    assert len(specs) >= 9
    rejected = {str(spec): _errors(_load(spec)) for spec in specs}
    assert {name: errors for name, errors in rejected.items() if errors} == {}


def test_schema_accepts_what_validation_accepts_in_the_readme_shapes():
    # durations as seconds or text, env values as any scalar, literal inputs, a spec that extends a base
    assert _errors({"version": 1, "name": "x", "code": ".", "command": "python t.py",
                    "resources": {"nodes": 2, "gpus_per_node": 0}, "targets": {"azureml": {"timeout": "1h30m"}},
                    "env": {"A": 1, "B": 0.5, "C": "x"}, "inputs": {"epochs": 5}}) == []
    assert _errors({"version": 1, "targets": {"hpcpack": {"runtime": 3600}}}) != []  # no base: name, code and command are needed
    assert _errors({"version": 1, "extends": "base.yaml", "resources": {"nodes": 4}}) == []


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(gen=valid_specs("azureml"))
def test_schema_accepts_generated_valid_specs(gen):
    assert _errors(gen.data) == []


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(gen=valid_specs("hpcpack"))
def test_schema_accepts_generated_valid_hpcpack_specs(gen):
    assert _errors(gen.data) == []


BASE = {"version": 1, "name": "x", "code": ".", "command": "python t.py", "resources": {"gpus_per_node": 0}}


def test_schema_rejects_a_misspelt_key_where_it_is():
    assert [path for path, _ in _errors({**BASE, "resourcse": {"nodes": 2}})] == [[]]
    errors = _errors({**BASE, "resources": {"node": 2, "gpus_per_node": 0}})
    assert errors and errors[0][0] == ["resources"] and "'node'" in errors[0][1]


def test_schema_rejects_a_wrong_type_where_it_is():
    errors = _errors({**BASE, "resources": {"nodes": "two", "gpus_per_node": 0}})
    assert [path for path, _ in errors] == [["resources", "nodes"]]
    assert _where({**BASE, "targets": {"azureml": {"timeout": "two hours"}}})[0] == ["targets", "azureml", "timeout"]
    assert _where({**BASE, "env": {"A": True}}) == (["env", "A"], "True is not of type 'string', 'integer', 'number'")
    assert _where({**BASE, "targets": {"azureml": {"compute": 7}}})[0] == ["targets", "azureml", "compute"]


def test_check_jsonschema_accepts_the_schema_and_every_spec():
    """check-jsonschema checks the schema's own patterns as ECMAScript regexes, as editors compile
    them (yaml-language-server): a Python-only escape (`\\"` in a character class) broke that."""
    import shutil
    import sys
    from pathlib import Path

    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    specs = sorted(str(p) for p in [*SPECS.glob("*.yaml"), *(REPO / "tests" / "specs").glob("*.yaml")])
    proc = subprocess.run([tool, "--schemafile", str(SCHEMA), *specs], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- bases: the files specs extend, checked by schema/trainspec.base.schema.json -------------------

def _base_errors(data):
    schema = json.loads(BASE_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return sorted((list(e.absolute_path), e.message) for e in jsonschema.Draft202012Validator(schema).iter_errors(data))


def _base_where(data):
    schema = json.loads(BASE_SCHEMA.read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    return list(error.absolute_path), error.message


def real_bases():
    """Base files as teams write them: bases/ of this repository, the bases the extends tests
    compose, and the base of the 500-spec benchmark repository."""
    import sys

    from test_compose import ROOT
    from test_review import BASE as REVIEW_BASE

    sys.path.insert(0, str(REPO / "benchmarks"))
    from check_500 import BASE as BENCH_BASE

    texts = {str(p): p.read_text() for p in sorted((REPO / "bases").glob("*.yaml"))}
    assert texts, "bases/ holds an example base"
    texts.update({"test_compose ROOT": ROOT, "test_review BASE": REVIEW_BASE, "check_500 BASE": BENCH_BASE,
                  "test_compose middle": "extends: ../base/root.yaml\nname: middle\nresources:\n  nodes: 4\n",
                  "a part of target settings": "targets:\n  ray:\n    location: eastus\n  hpcpack:\n"
                                               "    node_group: LinuxNodes\n"})
    return texts


def test_base_schema_accepts_real_bases_the_spec_schema_rejects():
    bases = real_bases()
    assert {name: _base_errors(YAML(typ="rt").load(text)) for name, text in bases.items()} == \
        dict.fromkeys(bases, [])
    assert _errors(YAML(typ="rt").load(bases[str(REPO / "bases" / "gpu-cluster.yaml")])) != []  # why a second schema
    assert (REPO / "bases" / "gpu-cluster.yaml").read_text().startswith(
        "# yaml-language-server: $schema=../schema/trainspec.base.schema.json\n")


def test_base_schema_accepts_every_full_spec_too():
    specs = sorted([*SPECS.glob("*.yaml"), *(REPO / "tests" / "specs").glob("*.yaml")])
    assert {str(s): _base_errors(_load(s)) for s in specs} == {str(s): [] for s in specs}


def test_base_schema_rejects_misspelt_keys_and_wrong_types_where_they_are():
    assert [path for path, _ in _base_errors({"resourcse": {"nodes": 2}})] == [[]]
    assert [path for path, _ in _base_errors({"resources": {"node": 2}})] == [["resources"]]
    assert [path for path, _ in _base_errors({"resources": {"nodes": "two"}})] == [["resources", "nodes"]]
    assert _base_where({"targets": {"azureml": {"compute": 7}}})[0] == ["targets", "azureml", "compute"]
    assert _base_where({"targets": {"ray": {"locaton": "eastus"}}}) == \
        (["targets", "ray"], "Additional properties are not allowed ('locaton' was unexpected)")
    assert [path for path, _ in _base_errors({"version": 2})] == [["version"]]
    assert [path for path, _ in _base_errors({"env": {"A": True}})] == [["env", "A"]]
    assert _base_errors(["not", "a", "mapping"]) != []


def test_check_jsonschema_accepts_the_base_schema_and_real_bases(tmp_path):
    import shutil
    import sys
    from pathlib import Path

    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    files = []
    for i, text in enumerate(real_bases().values()):
        files.append(tmp_path / f"base-{i}.yaml")
        files[-1].write_text(text)
    proc = subprocess.run([tool, "--schemafile", str(BASE_SCHEMA), *map(str, files)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files[0].write_text("resources:\n  nodez: 2\n")
    proc = subprocess.run([tool, "--schemafile", str(BASE_SCHEMA), str(files[0])], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "'nodez'" in proc.stdout, proc.stdout
