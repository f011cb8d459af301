"""Serialisation shared by the targets: YAML through ruamel.yaml, headers, stable bytes.

Every user string reaches an output file through a library that escapes it; this module is
the YAML half of that promise. Output is deterministic: insertion order is kept, lines never
wrap, and strings a YAML 1.1 reader (PyYAML, which azure-ai-ml and Ray use) would turn into
booleans, numbers or dates are quoted.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, Mapping, Optional

from trainspec import __version__

_YAML11_NON_STRING = re.compile(
    r"""^(?:
        ~|null|Null|NULL|
        y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|
        [-+]?(?:0|[1-9][0-9_]*)|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?0b[01_]+|
        [-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|
        [-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|
        [-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|
        [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*|=|<<
    )$""", re.X)


_SPECIAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def _style(value: str) -> Optional[str]:
    """How a string is written: double-quoted when a reader could take it for something else or
    only escapes carry it, literal block when it is several plain lines, else plain."""
    if _SPECIAL.search(value):
        # control characters and Unicode line breaks: only a double-quoted scalar carries them
        # unchanged (escaped); a plain or literal one lets readers turn NEL into a line end
        return '"'
    if "\n" in value.rstrip("\n") and not any(c in value for c in "\t\r") and value == value.strip(" "):
        return "|"
    if value == "" or _YAML11_NON_STRING.match(value):
        return '"'
    return None


def _plain(value: Any) -> Any:
    """Mappings -> dicts (order kept), tuples -> lists: the types the representer knows."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _yaml():
    """ruamel.yaml with libyaml's emitter (ruamel.yaml.clib): 4x faster than the pure-Python
    one, and the one emitter every install uses, so the bytes never depend on what is installed."""
    from ruamel.yaml import YAML
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
    from ruamel.yaml.representer import SafeRepresenter
    from ruamel.yaml.tag import Tag

    # one Tag per type, made once: given a string, ruamel makes (and URI-decodes) a Tag for every
    # node, a quarter of the time of a dump
    tags = {name: Tag(suffix=f"tag:yaml.org,2002:{name}") for name in ("str", "int", "bool", "null", "map", "seq")}

    class Representer(SafeRepresenter):
        def represent(self, data: Any) -> None:
            self.serializer.serialize(self.node(data))
            self.represented_objects, self.object_keeper, self.alias_key = {}, [], None

        def node(self, value: Any) -> Any:
            """The node the methods below make for ``value``, made directly for the plain types
            (ruamel's generic dispatch and alias bookkeeping was a fifth of a cold `check`):
            every mapping and list of ``_plain``'s output is a new object, so none is an alias."""
            kind = type(value)
            if kind is str:
                return ScalarNode(tags["str"], value, style=_style(value))
            if kind is dict:
                return MappingNode(tags["map"], [(self.node(k), self.node(v)) for k, v in value.items()],
                                   flow_style=False)
            if kind is list:
                return SequenceNode(tags["seq"], [self.node(v) for v in value], flow_style=False)
            if kind is bool:
                return ScalarNode(tags["bool"], "true" if value else "false")
            if kind is int:
                return ScalarNode(tags["int"], str(value))
            if value is None:
                return ScalarNode(tags["null"], "null")
            return self.represent_data(value)

        def represent_str(self, value: str):
            return self.represent_scalar(tags["str"], value, style=_style(value))

        def represent_int(self, value: int):
            return self.represent_scalar(tags["int"], str(value))

        def represent_bool(self, value: bool, anchor=None):
            return self.represent_scalar(tags["bool"], "true" if value else "false")

        def represent_none(self, value: None):
            return self.represent_scalar(tags["null"], "null")

        def represent_dict(self, value: dict):
            return self.represent_mapping(tags["map"], value)

        def represent_list(self, value: list):
            return self.represent_sequence(tags["seq"], value)

    for kind, method in ((str, Representer.represent_str), (int, Representer.represent_int),
                         (bool, Representer.represent_bool), (type(None), Representer.represent_none),
                         (dict, Representer.represent_dict), (list, Representer.represent_list)):
        Representer.add_representer(kind, method)
    yaml = YAML(typ="safe", pure=False)
    if yaml.Emitter.__module__.split(".")[:3] != ["ruamel", "yaml", "clib"]:
        raise RuntimeError("trainspec needs ruamel.yaml.clib (pip install ruamel.yaml.clib): its emitter "
                           "keeps compiled files byte-identical across installs")
    yaml.Representer = Representer
    yaml.width = 1 << 16
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    yaml.allow_unicode = True
    return yaml


_YAML = None


def yaml_bytes(data: Mapping[str, Any], header: str = "") -> bytes:
    """``data`` as YAML bytes, preceded by ``header`` (already a comment block)."""
    global _YAML
    if _YAML is None:
        _YAML = _yaml()
    stream = io.StringIO()
    stream.write(header)
    _YAML.dump(_plain(data), stream)
    return stream.getvalue().encode("utf-8")


def header_path(path: str) -> str:
    """The spec's path as a header names it: as written when every character is printable and
    nothing in it can end or mimic a comment of any output's format; else as a JSON string
    (``"specs/a\\u202eb.yaml"``) whose escapes show every invisible character (bidi controls,
    zero-width and other format characters, spaces other than ' ') and break every ``--`` (which an
    XML comment cannot hold). Validation refuses the characters that no comment can carry (line
    breaks and other controls: spec/validate.py); ``spec_path`` reads either form back."""
    if path.isprintable() and "--" not in path and not path.startswith('"') and _HEADER_END not in path:
        return path
    out = ['"']
    for ch in path:
        if ch in '"\\':
            out.append("\\" + ch)
        elif not ch.isprintable() or (ch == "-" and out[-1].endswith("-")):
            out.append(json.dumps(ch)[1:-1] if ord(ch) > 0x7F else "\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def spec_path(written: str) -> str:
    """The spec's path from a header's text of it (``header_path``'s inverse; a path written
    before paths were quoted is read as written)."""
    if len(written) > 1 and written.startswith('"') and written.endswith('"'):
        try:
            value = json.loads(written)
        except ValueError:
            return written
        if isinstance(value, str):
            return value
    return written


_HEADER_END = " (spec sha256:"


def header_lines(source_display: str, digest: str, target: str) -> list[str]:
    return [
        f"Generated by trainspec {__version__} for {target} from {header_path(source_display)}{_HEADER_END}{digest}).",
        "Edit the spec, not this file: `trainspec compile` rewrites it.",
    ]


def yaml_header(source_display: str, digest: str, target: str) -> str:
    return "".join(f"# {line}\n" for line in header_lines(source_display, digest, target))
