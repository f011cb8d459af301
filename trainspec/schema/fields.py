"""Formats and conversions of spec fields: plain data and functions, no pydantic.

Shared by the pydantic models (model.py), the snapshot validator (structure.py), which calls
the conversions by name, and the checks in validate.py.
"""

import re

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IO_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"  # Azure ML input/output names
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SHM_PATTERN = r"^[1-9][0-9]*[bkmg]$"

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# the same, for the JSON Schema: not empty, surrounding spaces allowed (parse_duration strips them)
DURATION_PATTERN = r"^\s*(?=\d)(\d+d)?(\d+h)?(\d+m)?(\d+s)?\s*$"


def parse_duration(value):
    """'2d', '12h', '1h30m', '45s' or an integer number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 2d, 12h, 90m or a number of seconds")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value and _DURATION.match(value.strip()):
        d, h, m, s = (int(x or 0) for x in _DURATION.match(value.strip()).groups())
        seconds = ((d * 24 + h) * 60 + m) * 60 + s
    else:
        raise ValueError("expected a duration like 2d, 12h, 90m or a number of seconds")
    if seconds < 1:
        raise ValueError("a duration must be at least 1 second")
    return seconds


def scalar_to_str(value):
    """Environment values: YAML ints and floats become strings; booleans are ambiguous."""
    if isinstance(value, bool):
        raise ValueError('a boolean is ambiguous as an environment value; quote it ("true" or "1")')
    if isinstance(value, (int, float)):
        return str(value)
    return value


def exact_int(value):
    """`version: true` and `version: 1.0` equal 1 in Python; a format version is the integer."""
    if isinstance(value, (bool, float)):
        raise ValueError("expected the integer 1")
    return value


def literal_input(value):
    """`inputs: {epochs: 5}`: a scalar is a literal input, as in Azure ML's own job files."""
    if isinstance(value, (str, int, float, bool)):
        return {"value": value}
    return value
