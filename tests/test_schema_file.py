"""The committed JSON Schema for editors is what `trainspec schema` prints, and documents every
field with a description and an example."""

import json
import subprocess

from conftest import REPO, SPECS, trainspec_cmd

SCHEMA = REPO / "schema" / "trainspec.schema.json"


def test_committed_schema_is_current():
    printed = subprocess.run([*trainspec_cmd(), "schema"], capture_output=True, text=True, check=True).stdout
    assert SCHEMA.read_text() == printed, "schema/trainspec.schema.json is stale: run trainspec schema > " \
                                          "schema/trainspec.schema.json"


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
