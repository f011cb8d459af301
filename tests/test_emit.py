"""compiler/emit.py's YAML writer: libyaml's emitter fed our own node tree, asked the questions
ruamel.yaml's Resolver answers (whether a scalar reads back as its tag), so its bytes are those
of a ruamel.yaml dump of the same tree; and the runtime files copied next to jobs."""

import io
import itertools
import random

import pytest

import trainspec
from trainspec.compiler import base, emit

TRICKY = ["", " ", "a", "yes", "No", "on", "OFF", "y", "n", "~", "null", "Null", "true", "False", "0", "-1", "+3",
          "0o17", "017", "0x1F", "0b101", "1_000", "1e3", "1.5", "-.5", ".inf", "-.INF", ".NaN", "1:20", "190:20:30",
          "2024-01-01", "2024-1-1 10:00:00", "<<", "=", "!tag", "&anchor", "*alias", "- item", "a: b", "#comment",
          "key:", "@x", "`y", "%z", "|", ">", "?", "[1]", "{a: 1}", "line\nbreak", "tab\there", "é", "😀", "\x85",
          "\u2028", "x\ufeff", "t", "T", "f", "F", "nan", "inf", "0.", "._", "1__0", "8", "6105", "python"]


def _ruamel_dump(data) -> bytes:
    """The same document through ruamel.yaml's own YAML.dump, with its own Resolver and the
    writer's node builder: what yaml_bytes wrote before it fed the emitter itself."""
    from ruamel.yaml import YAML

    representer_class, _ = emit._writer()

    class Representer(representer_class):
        def represent(self, value):
            self.serializer.serialize(self.node(value))

    yaml = YAML(typ="safe", pure=False)
    yaml.Representer = Representer
    yaml.width = 1 << 16
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    yaml.sort_base_mapping_type_on_output = False
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue().encode("utf-8")


@pytest.mark.parametrize("value", TRICKY, ids=repr)
def test_the_writer_asks_what_ruamels_resolver_answers(value):
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
    from ruamel.yaml.resolver import Resolver

    _, writer = emit._writer()
    resolver = Resolver()
    for kind, flags in ((ScalarNode, (True, False)), (ScalarNode, (False, True)), (SequenceNode, True),
                        (MappingNode, True)):
        assert writer.resolve(None, kind, value, flags) == str(resolver.resolve(kind, value, flags)), (kind, flags)


def test_yaml_bytes_are_a_ruamel_dump_of_the_same_document():
    data = {"plain": TRICKY, "as keys": {value: value for value in TRICKY},
            "numbers": [0, -7, 10 ** 20, 1.5, float("inf"), True, False, None], "nested": {"a": [{"b": ("c", "d")}]},
            "empty": {}, "none": [], "left to ruamel": [{8, 1}, 2.5, -0.0, float("nan")]}
    assert emit.yaml_bytes(data, "# header\n") == b"# header\n" + _ruamel_dump(data)


def test_a_value_the_writer_cannot_represent_is_ruamels_error():
    from ruamel.yaml.representer import RepresenterError

    with pytest.raises(RepresenterError):
        emit.yaml_bytes({"x": object()})
    assert emit.yaml_bytes({"x": 1}) == b"x: 1\n"  # nothing left over from the failed one


def test_runtime_files_of_the_package_are_its_bytes_and_any_other_is_read_at_each_call(tmp_path):
    from trainspec.runtime import shim_source

    shipped = base.shim_file("slurm")
    assert shipped.data == shim_source("slurm").encode() and shipped.runtime == trainspec.__version__
    assert base.shim_file("slurm").data is shipped.data  # joined once per process
    older = tmp_path / "shim.py"  # a test's older runtime: never taken for the package's
    older.write_bytes(b"one")
    assert base.runtime_file("trainspec_shim.py", older).data == b"one"
    older.write_bytes(b"two")
    assert base.runtime_file("trainspec_shim.py", older).data == b"two"


def _style_by_patterns(value):
    """_style's answer from its patterns alone (what it computed for every string before the
    quick answer for plain one-line ASCII strings)."""
    special, non_string = emit._patterns()
    if special.search(value):
        return '"'
    if "\n" in value.rstrip("\n") and not any(c in value for c in "\t\r") and value == value.strip(" "):
        return "|"
    if value == "" or non_string.match(value):
        return '"'
    return None


def test_the_quick_style_of_a_plain_string_is_the_patterns_answer():
    alphabet = "aeiouyntfolrsNYTFOLRS0159+-._:=<~ #'\"\\/\n\t\r\x00\x7f\x85é"
    values = [*TRICKY, *sorted(emit._YAML11_WORDS), *(a + b for a in alphabet for b in alphabet),
              *(w + tail for w in emit._YAML11_WORDS for tail in ("\n", " ", "x", "\t", ".5", "1"))]
    values += [a + b + c for a in "nNyYtTfFoO~=<" for b in "aeoulrsUL<" for c in "elsEFNS\n"]
    digits = "0178_"  # digits alone: ints, octals (0 then 0-7) and neither ("08"), as the patterns say
    values += ["".join(d) for n in range(1, 5) for d in itertools.product(digits, repeat=n)]
    values += ["0.5", "1e3", "1:30", "2026-12-07", "+1", "-0", ".inf", "1_000", "0x1F", "0b101", "12:", "1.2.3",
               "1f450e678877eb74", "0.1.0", "./x", "../y", ".", "..", "._", ".e5", ".5e", "4x4", "0xg", "1_x", "-x"]
    chars = "0123456789_.eE:xbB-+fiInN/ a"  # what the number, date and time forms start and go on with
    chance = random.Random(30)
    values += ["".join(chance.choice(chars) for _ in range(chance.randint(1, 7))) for _ in range(20000)]
    assert [emit._style(v) for v in values] == [_style_by_patterns(v) for v in values]
    assert {emit._style(v) for v in values} == {None, '"', "|"}
