"""Credentials in a spec: recognised, refused, never printed.

A spec is reviewed in pull requests and compiled into every job file, so a token written in it
is published. Two ways to recognise one:

- by **name**: an environment variable (or a template variable, or a literal input) named like a
  credential (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, ``*PASSWORD*``, ``*PASSWD*``; case-insensitive)
  with a *literal* value (``literal_value``);
- by **shape**: a string anywhere in the spec that holds a token of a known kind (``SHAPES``:
  Hugging Face, GitHub, AWS, Slack, OpenAI-style, a JWT, an Azure storage account key, a
  connection string's or SAS URL's key, a password in a URL, a private key).

``secrets_in`` finds them for validation (the message names the kind, never
the value); ``redact`` and friends replace them with ``<redacted>`` in everything the review
commands print (defence in depth: a base revision or a committed output may still hold one).
Plain data and ``re`` only: every layer may use it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Dict, Iterator, List, Optional, Pattern, Tuple

from trainspec.core.patterns import Lazy

REDACTED = "<redacted>"

HINT = ("keep it where the job runs and reference it from `secrets:` (secrets.NAME: a Kubernetes Secret's key, a "
        "file on the nodes, an Azure Key Vault secret; docs/spec.md, \"Secrets\"), never the value in the spec; a "
        "value that was ever committed is in the repository's history: revoke it")

# (what it is, the pattern): a token's own prefix and length, bounded on the left by a character
# that cannot be part of it; every lookahead is bounded, so a search is linear in the text's length
_BEFORE = r"(?<![A-Za-z0-9])"
SHAPES: Tuple[Tuple[str, str], ...] = (
    ("a Hugging Face token (hf_...)", _BEFORE + r"hf_[A-Za-z0-9]{30,}"),
    ("a GitHub token (ghp_..., github_pat_...)",
     _BEFORE + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("an AWS access key id (AKIA...)", _BEFORE + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ("a Slack token (xox...)", _BEFORE + r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    ("an API key (sk-...)", _BEFORE + r"sk-(?=[A-Za-z_-]{0,40}[0-9])[A-Za-z0-9_-]{20,}"),
    ("a JSON Web Token (eyJ...)", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    ("an Azure storage account key", r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{86}==(?![A-Za-z0-9+/=])"),
    ("the key of a connection string (AccountKey, SharedAccessKey, SharedAccessSignature)",
     r"(?<![A-Za-z0-9])(?i:AccountKey|SharedAccessKey|SharedAccessSignature)=[^;\s\"']+"),
    ("the signature of a SAS URL (sig)", r"(?<=[?&;])sig=[A-Za-z0-9%+/=]{16,}"),
    ("a password in a URL (user:password@)", r"(?<=://)[^\s/:@'\"]{1,256}:(?![$*])[^\s/@'\"]{1,256}(?=@)"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"),
)

# names: *_TOKEN, *_KEY, *_SECRET, *PASSWORD*, *PASSWD* (and TOKEN, SECRET themselves; KEY alone is too common)
_NAME = re.compile(r"(?i)(?:_|^(?=TOKEN|SECRET))(TOKEN|KEY|SECRET)$|(PASSWORD|PASSWD)")
# *_KEY and *_TOKEN that are not credentials: a key of a sort or a map, a public key, a
# tokenizer's special tokens; and names of a file or folder that holds a secret (the way to keep it out)
_NOT_CREDENTIALS = Lazy(
    r"(?i)(?:^|_)(?:SORT|PARTITION|CACHE|GROUP|METRIC|MONITOR|PRIMARY|FOREIGN|LABEL|LOOKUP|INDEX|DICT|MAP|"
    r"PUBLIC|PAD|BOS|EOS|UNK|SEP|CLS|MASK|SPECIAL)_(?:KEY|TOKEN)$|_(?:FILE|PATH|DIR|FOLDER)$")
# values of a credential-named variable that hold no credential
_FLAGS = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "none", "null"})
_REFERENCE = Lazy(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|\([A-Za-z_][A-Za-z0-9_]*\))")
_FILE_PATH = Lazy(r"(?:/|~/|\./|\.\./)\S*")
_NAMED_FIELDS = ("env", "vars", "inputs")  # where a value has a name of its own


# what every match of SHAPES[i] contains (the connection-string keys in lower case): a shape whose
# marks are all absent from a text cannot match it, and `in` finds a mark far faster than the
# regular expression tries eleven alternatives at every character
_MARKS: Tuple[Tuple[str, ...], ...] = (
    ("hf_",), ("gh", "github_pat_"), ("AKIA", "ASIA"), ("xox",), ("sk-",), ("eyJ",), ("==",),
    ("accountkey", "sharedaccess"), ("sig=",), ("://",), ("-----BEGIN",),
)
_LOWER_MARKS = frozenset({7})  # looked for in the text in lower case
assert len(_MARKS) == len(SHAPES)


@lru_cache(maxsize=None)
def _compiled(which: Tuple[int, ...] = tuple(range(len(SHAPES)))) -> Pattern[str]:
    """The shapes ``which`` in one pattern (group k<i>: SHAPES[i]), compiled on first use."""
    return re.compile("|".join(f"(?P<k{i}>{SHAPES[i][1]})" for i in which) or "(?!)")


def _shapes_for(text: str) -> Pattern[str]:
    """The pattern of the shapes that can match ``text``: those with a mark in it."""
    lower = None
    which = []
    for i, marks in enumerate(_MARKS):
        if i in _LOWER_MARKS:
            lower = text.lower() if lower is None else lower
            haystack = lower
        else:
            haystack = text
        if any(mark in haystack for mark in marks):
            which.append(i)
    return _compiled(tuple(which))


def credential_kind(text: str) -> Optional[str]:
    """What kind of credential ``text`` holds (the first one found), or None."""
    if not isinstance(text, str) or len(text) < 10:
        return None
    return _kind(text)


@lru_cache(maxsize=4096)
def _kind(text: str) -> Optional[str]:
    """credential_kind's answer, once per text in a process: `check` of a repository asks about
    each shared base's strings once per spec that extends it."""
    m = _shapes_for(text).search(text)
    return SHAPES[int(m.lastgroup[1:])][0] if m else None


def credential_name(name: Any) -> bool:
    """A variable named like a credential (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``)."""
    return isinstance(name, str) and bool(_NAME.search(name)) and not _NOT_CREDENTIALS.search(name)


def _pattern(name: str) -> str:
    m = _NAME.search(name)
    return f"*_{m.group(1).upper()}" if m.group(1) else f"*{m.group(2).upper()}*"


def literal_value(value: Any) -> bool:
    """A value that could be a credential: anything but nothing (None, an empty or blank
    string), a flag (0, 1, true, false, yes, no, on, off, none, null; a YAML boolean), a
    reference to a variable of the environment the job runs in ($NAME, ${NAME}, $(NAME)) or the
    path of a file (/..., ~/..., ./..., ../...)."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return str(value) not in _FLAGS
    if not isinstance(value, str):
        return False
    text = value.strip()
    return bool(text) and text.lower() not in _FLAGS and not _REFERENCE.fullmatch(text) \
        and not _FILE_PATH.fullmatch(text)


# --- validation -------------------------------------------------------------------------------

def secrets_in(data: Any) -> List[Tuple[tuple, str, bool]]:
    """(spec path, what it is, on the key?) of every credential in a loaded spec: by name in
    ``env``, ``vars`` and literal ``inputs``, by shape in every key and string. Each container
    is visited once (an alias bomb is not unrolled), without recursion (deep nesting)."""
    found: Dict[tuple, Tuple[tuple, str, bool]] = {}
    if isinstance(data, dict):
        for field in _NAMED_FIELDS:
            section = data.get(field)
            if not isinstance(section, dict):
                continue
            for name, value in section.items():
                where = (field, name)
                if field == "inputs" and isinstance(value, dict):  # a literal input: {value: ...}, or `x: 5` for short
                    if "value" not in value or "path" in value:
                        continue
                    where, value = (field, name, "value"), value["value"]
                if credential_name(name) and literal_value(value) and not isinstance(value, (dict, list)):
                    found[where] = (where, f"{name} is named like a credential ({_pattern(name)}) and has a "
                                    "literal value: every compiled job would hold it, and plan would print it", False)
    for path, text, on_key in _strings(data):
        kind = credential_kind(text)
        if kind:
            found[path] = (path, f"holds what looks like {kind}", on_key)  # the shape says more than the name
    return list(found.values())


def _strings(data: Any) -> Iterator[Tuple[tuple, str, bool]]:
    seen = set()
    stack: List[Tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            yield path, value, False
        elif isinstance(value, (dict, list)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in reversed(list(items)):
                if isinstance(key, str):
                    yield path + (key,), key, True
                stack.append((path + (key,), item))


# --- redaction --------------------------------------------------------------------------------

_NAMES = r"[A-Za-z0-9_]*(?:(?:TOKEN|KEY|SECRET)\b|PASS(?:WORD|WD)[A-Za-z0-9_]*)"
_QUOTED = r"'[^'\n]*'|\"(?:\\.|[^\"\\\n])*\"|\$'(?:\\.|[^'\\\n])*'"
# NAME=value (shell, a plan line), NAME: value / "NAME": "value" (YAML, JSON), Kubernetes'
# `- name: NAME` + `value: ...`, HPC Pack's <Name>NAME</Name><Value>...</Value>
_ASSIGNMENTS = (
    rf"(?i)(?<![A-Za-z0-9_])(?P<name>{_NAMES})(?P<sep>=)(?P<value>{_QUOTED}|[^\s;&|]+)",
    rf"(?i)(?<![A-Za-z0-9_])(?P<name>{_NAMES})(?P<sep>[\"']?[ \t]*:[ \t]+)(?P<value>{_QUOTED}|[^\n,}}]+)",
    rf"(?i)name:[ \t]*[\"']?(?P<name>{_NAMES})[\"']?[ \t]*\r?\n(?P<sep>[ \t]*value:[ \t]*)(?P<value>[^\n]*)",
    rf"(?i)<Name>(?P<name>{_NAMES})</Name>(?P<sep>\s*<Value>)(?P<value>[^<]*)",
)


@lru_cache(maxsize=None)
def _assignments() -> Tuple[Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in _ASSIGNMENTS)


def redact_shapes(text: str) -> str:
    """``text`` with every credential-shaped substring replaced by ``<redacted>``."""
    if not isinstance(text, str) or len(text) < 10:
        return text
    return _shapes_for(text).sub(REDACTED, text)


def redact(text: str) -> str:
    """``text`` with credential-shaped substrings and the literal values of credential-named
    variables (``NAME=value``, ``NAME: value``, Kubernetes' and HPC Pack's name/value pairs)
    replaced by ``<redacted>``."""
    if not isinstance(text, str):
        return text
    text = redact_shapes(text)

    def hide(m: "re.Match[str]") -> str:
        value = m.group("value").strip()
        bare = (value[1:] if value.startswith("$'") else value).strip("'\"")
        if not credential_name(m.group("name")) or not literal_value(bare) or bare == REDACTED:
            return m.group(0)
        return m.group(0)[:m.start("value") - m.start()] + REDACTED

    lower = text.lower()
    if not any(word in lower for word in ("token", "key", "secret", "pass")):
        return text  # no credential-named variable can be assigned in it
    for pattern in _assignments():
        text = pattern.sub(hide, text)
    return text


def redact_bytes(data: Optional[bytes]) -> Optional[bytes]:
    """``redact`` for a file's bytes (kept byte for byte where it is not UTF-8)."""
    if data is None:
        return None
    return redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact_value(name: Any, value: Any) -> Any:
    """A value the review commands print, named ``name`` (a variable, or a dotted spec field):
    ``<redacted>`` for a literal value of a credential-named one, credential shapes redacted in
    any string, containers redacted all through."""
    last = name.rsplit(".", 1)[-1] if isinstance(name, str) else name
    if credential_name(last) and literal_value(value) and not isinstance(value, (dict, list)):
        return REDACTED
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(None, v) for v in value]
    return value
