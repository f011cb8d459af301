"""Writes trainspec/schema/spec.core.json, the stored structure of the spec model
(schema/structure.py), after a change to schema/model.py or to a target's settings model.

    python docs/gen_structure.py

The registry is imported first: it plugs the targets' settings models into the schema."""

import trainspec.registry  # noqa: F401  - the targets, plugged into the schema
from trainspec.schema.structure import SNAPSHOT, write

if __name__ == "__main__":
    write()
    print(f"wrote {SNAPSHOT}")
