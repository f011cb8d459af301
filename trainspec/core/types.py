"""The pydantic building blocks every part of the spec is written with: the strict, frozen,
closed ``Model`` and the field types a spec file spells more loosely than it is validated.

Imported by model.py and by each target's settings model (``settings_model()`` in
trainspec/targets/<name>/settings.py) -- never on the compile path, which validates with the
stored core schema (structure.py) instead of importing pydantic.
"""

from __future__ import annotations

from typing import Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr,
                      WithJsonSchema)
from typing_extensions import Annotated

from trainspec.core.fields import DURATION_PATTERN, parse_duration, scalar_to_str


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# The JSON Schema (for editors) says what a file may hold, which is more than the validated type:
# a duration is seconds or `2d`/`12h`/`1h30m`; an env value any scalar but a boolean.
Duration = Annotated[int, BeforeValidator(parse_duration), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": DURATION_PATTERN}]})]
EnvValue = Annotated[str, BeforeValidator(scalar_to_str), WithJsonSchema({"type": ["string", "integer", "number"]})]
LiteralValue = Union[StrictStr, StrictInt, StrictFloat, StrictBool]
