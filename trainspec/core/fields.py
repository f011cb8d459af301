"""Formats and conversions of spec fields: plain data and functions, no pydantic.

Shared by the pydantic models (model.py), the snapshot validator (structure.py), which calls
the conversions by name, and the checks in validate.py.
"""

import re

from trainspec.core.patterns import Lazy

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IO_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"  # Azure ML input/output names
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SHM_PATTERN = r"^[1-9][0-9]*[bkmg]$"
# resources.memory_per_node: a whole number and a unit, Kubernetes' binary (Mi, Gi, Ti: 2^20, 2^30,
# 2^40 bytes) or decimal (M, G, T: 10^6, 10^9, 10^12 bytes) suffixes; no bare bytes, no k
MEMORY_UNITS = {"Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
MEMORY_PATTERN = r"^[1-9][0-9]{0,8}[MGT]i?$"
# a character that needs no shell quoting (an interpreter name, a shared path): the quote characters
# are written unescaped, so that editors' ECMAScript regex engines (unicode mode) compile it too
SHELL_WORD = r"[^\s;&|<>()$`'" + '"' + r"\\*?]"

# where data or code lives that is not a path on this machine (Azure ML assets, datastores, URLs)
REMOTE_PREFIXES = ("azureml:", "http://", "https://", "wasb://", "wasbs://", "abfs://", "abfss://", "adl://")


def is_remote(path: str) -> bool:
    return path.startswith(REMOTE_PREFIXES)


def unwritable_char(path: str):
    """The first character of a spec's path that no output may name, or None. Refused: what ends
    or breaks a line of some output's comment or string (C0 and C1 controls, DEL, U+2028/U+2029:
    YAML 1.1 readers break lines at NEL and both), a byte that is not UTF-8 (Python's lone
    surrogates: no output can encode them) and Unicode noncharacters (no XML may hold U+FFFE or
    U+FFFF). Validation refuses such a spec path; the header reader refuses such a header. The rest
    of Unicode is allowed: headers escape what is invisible (compiler/emit.py header_path)."""
    if path.isprintable():
        return None  # the common case: printable is stricter than allowed
    import unicodedata

    for ch in path:
        code = ord(ch)
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or 0xFDD0 <= code <= 0xFDEF \
                or (code & 0xFFFE) == 0xFFFE:
            return ch
    return None


_DURATION = Lazy(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
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


def memory_bytes(quantity: str) -> int:
    """'900Gi' -> 966367641600, '512G' -> 512000000000: a memory_per_node (MEMORY_PATTERN) in bytes."""
    match = re.fullmatch(r"([0-9]+)([A-Za-z]+)", quantity)
    return int(match.group(1)) * MEMORY_UNITS[match.group(2)]


def mebibytes(quantity: str) -> int:
    """A memory_per_node in MiB, rounded up: what Slurm's --mem and HPC Pack's MinMemory count in
    (a decimal quantity is seldom a whole number of MiB: 512G is 488281.25 MiB, asked as 488282)."""
    return -(-memory_bytes(quantity) // (1 << 20))


def duration_text(seconds: int) -> str:
    """43200 -> 12h, 5400 -> 1h30m, 90061 -> 1d1h1m1s: seconds as a spec writes a duration
    (parse_duration reads it back)."""
    parts = [(seconds // 86400, "d"), (seconds // 3600 % 24, "h"), (seconds // 60 % 60, "m"), (seconds % 60, "s")]
    return "".join(f"{number}{unit}" for number, unit in parts if number) or "0s"


def scalar_to_str(value):
    """Environment values: YAML ints and floats become strings; booleans are ambiguous."""
    if isinstance(value, bool):
        raise ValueError('a boolean is ambiguous as an environment value; quote it ("true" or "1")')
    if isinstance(value, (int, float)):
        return str(value)
    return value


def named(value):
    """A reference written as its name alone (``runtime: torch-distributed``) -> ``{name: ...}``:
    one model for both forms, so a bad value is said at its field, not once per form."""
    if isinstance(value, str):
        return {"name": value}
    if not isinstance(value, dict):
        raise ValueError("expected a name, or a mapping with name")
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


# --- the words of a command line -------------------------------------------------------------------

_BLANKS = re.compile(r"[ \t\r\n]+")
# one piece of a word: an unquoted run, a backslash escape, a '...' or a "..." string; else the
# start of an unterminated quote or a trailing backslash
_PIECE = Lazy(r"""([^ \t\r\n'"\\]+)|\\(.)|'([^']*)'|"((?:[^"\\]|\\.)*)"|([ \t\r\n]+)|(.)""", re.S)
_DQ_ESCAPE = Lazy(r'\\(["\\])')


def split_command(command: str) -> list:
    """The words of ``command`` exactly as ``shlex.split`` (POSIX, no comments) gives them, in time
    linear in its length: shlex grows a word one character at a time, so a megabyte-long word
    takes it seconds (and ten megabytes, minutes). Raises ValueError where shlex does."""
    if not any(c in command for c in "'\"\\"):
        return _BLANKS.split(command.strip(" \t\r\n")) if command.strip(" \t\r\n") else []
    words, word = [], None
    for m in _PIECE.finditer(command):
        plain, escaped, single, double, blank, stray = m.groups()
        if blank is not None:
            if word is not None:
                words.append("".join(word))
            word = None
            continue
        if stray is not None:
            raise ValueError("No escaped character" if stray == "\\" else "No closing quotation")
        word = word if word is not None else []
        if plain is not None:
            word.append(plain)
        elif escaped is not None:
            word.append(escaped)
        elif single is not None:
            word.append(single)
        else:
            word.append(_DQ_ESCAPE.sub(r"\1", double))
    if word is not None:
        words.append("".join(word))
    return words
