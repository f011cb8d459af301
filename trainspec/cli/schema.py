"""`trainspec schema`: Print the JSON Schema of the spec (for editors: yaml-language-server).
--base: the schema of a base that specs extend (every field optional, names and types checked).
"""

from __future__ import annotations

import argparse



def command(args: argparse.Namespace) -> int:
    import json

    from trainspec.schema.model import Spec, base_json_schema

    print(json.dumps(base_json_schema() if args.base else Spec.model_json_schema(), indent=2, sort_keys=True))
    return 0
