"""The loader's two paths agree: libyaml's parser (fast) and ruamel's YAML 1.2 round-trip loader.

The fast path is trusted only with documents it reads without complaint, and only for the
result: data and every key's and value's position. These tests hold it to the round-trip
loader on the example specs, the bad-spec corpus, the golden sources and documents written to
probe where YAML 1.1 (libyaml) and 1.2 differ; and they check that what it declines is still
read, by the round-trip loader, exactly as before.
"""

import pytest

from conftest import REPO, SPECS
from trainspec.diagnostics import SpecError
from trainspec.schema import loader

PROBES = {
    "scalars": "a: 1\nb: 2.5\nc: true\nd: ~\ne: 0o17\nf: 0x1F\ng: 1_000\nh: .inf\ni: '012'\nj: 012\nk: yes\nl: On\n",
    "strings": 'a: "x\\ty\\u00e9\\x41"\nb: \'it\'\'s\'\nc: plain text here\nd: >\n  folded\n  text\ne: |\n  lit\n  eral\n',
    "multi-line plain": "a: one\n  two\n  three\nb: x\n",
    "unicode": "name: café\nnote: \"\\u2028 line sep\"\nemoji: 🚀\n",
    "nested": "a:\n  b:\n    c: [1, 2, {d: e}]\n    f: {g: [h, i]}\n",
    "anchors": "base: &b {x: 1, y: [1, 2]}\nuse: *b\nlist: [*b, *b]\n",
    "comments": "# top\na: 1 # trailing\n# middle\nb:\n  - x  # item\n  - y\n",
    "empty values": "a:\nb: []\nc: {}\nd: ''\n",
    "keys": "1: one\ntrue: t\n2.5: f\n'quoted key': q\n",
    "document markers": "---\na: 1\n...\n",
    "bom-less crlf": "a: 1\r\nb:\r\n  c: 2\r\n",
    "long": "a: " + "x" * 5000 + "\n",
    "indentless seq": "a:\n- 1\n- 2\nb:\n  - 3\n",
    "flow colon (1.2 only)": "environment: {image: pytorch:latest}\n",
    "merge": "base: &b {x: 1}\nuse:\n  <<: *b\n  y: 2\n",
    "date": "when: 2024-01-01\n",
    "explicit tag": "a: !!str 5\n",
    "directive": "%YAML 1.1\n---\na: yes\n",
    "two documents": "a: 1\n---\nb: 2\n",
}


def _slow(text: str):
    data = loader._parse(text, lambda *a, **k: AssertionError(a))
    positions = loader.Positions()
    plain = loader._walk(data, (), positions, [loader.MAX_NODES], 0, lambda *a, **k: AssertionError(a))
    return plain, positions


def _documents():
    files = sorted(SPECS.glob("*.yaml")) + sorted((REPO / "tests" / "bad_specs").glob("*.yaml"))
    texts = {f.name: f.read_text(encoding="utf-8", errors="replace") for f in files}
    texts.update({f"probe: {k}": v for k, v in PROBES.items()})
    return texts


@pytest.mark.parametrize("name", sorted(_documents()))
def test_fast_path_gives_what_the_round_trip_loader_gives(name):
    text = _documents()[name]
    fast = loader._fast_load(text)
    if fast is None:
        return  # declined: the round-trip loader reads it (next test)
    try:
        slow = _slow(text)
    except AssertionError:
        pytest.fail(f"the fast path accepted {name!r}, which the round-trip loader rejects")
    assert fast[0] == slow[0]
    assert fast[1].keys == slow[1].keys
    assert fast[1].values == slow[1].values


def test_the_example_specs_take_the_fast_path_and_yaml_1_1_surprises_do_not():
    for spec in SPECS.glob("*.yaml"):
        assert loader._fast_load(spec.read_text()) is not None, spec
    declined = {name for name, text in PROBES.items() if loader._fast_load(text) is None}
    assert {"flow colon (1.2 only)", "merge", "date", "explicit tag", "directive", "two documents"} <= declined
    # YAML 1.2 meanings either way: `yes`/`On` stay strings, 012 is an integer, a flow colon is text
    doc = loader.load_bytes(PROBES["scalars"].encode(), "p.yaml")
    assert (doc.data["k"], doc.data["l"], doc.data["j"]) == ("yes", "On", 12)
    assert loader.load_bytes(PROBES["flow colon (1.2 only)"].encode(), "p.yaml").data == {
        "environment": {"image": "pytorch:latest"}}
    assert loader.load_bytes(PROBES["merge"].encode(), "p.yaml").data["use"] == {"x": 1, "y": 2}


def test_errors_always_come_from_the_round_trip_loader(tmp_path):
    """Duplicate keys, alias bombs, deep nesting: the fast path declines and the message and
    position are the round-trip loader's (tests/bad_specs pins them)."""
    for text, fragment in (("a: 1\na: 2\n", 'duplicate key "a"'),
                           ("a: " + "[" * 60 + "]" * 60 + "\n", "nested too deeply"),
                           ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
                               f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
                               for i in range(6)), "expands to more than")):
        assert loader._fast_load(text) is None
        with pytest.raises(SpecError) as caught:
            loader.load_bytes(text.encode(), "x.yaml")
        assert fragment in caught.value.diagnostics[0].message


def _styles(value: str):
    """One string written as YAML in every way a spec might: double-quoted with escapes (as the
    hostile tests write it), and as ruamel's emitter chooses (plain, single-quoted, literal)."""
    import io

    from ruamel.yaml import YAML
    from test_hostile import yq

    yield f"env:\n  K: {yq(value)}\ncommand: {yq(value)}\n"
    yaml = YAML(typ="rt")
    yaml.width = 1 << 16
    for doc in ({"env": {"K": value}, "command": value}, {"list": [value, {"k": value}]}):
        stream = io.StringIO()
        yaml.dump(doc, stream)
        yield stream.getvalue()


def test_hostile_strings_read_the_same_on_both_paths():
    from test_hostile import HOSTILE

    checked = declined = 0
    for strings in HOSTILE.values():
        for value in strings:
            for text in _styles(value):
                fast = loader._fast_load(text)
                if fast is None:
                    declined += 1
                    continue
                slow = _slow(text)
                assert fast[0] == slow[0], text
                assert (fast[1].keys, fast[1].values) == (slow[1].keys, slow[1].values), text
                checked += 1
    assert checked > 40, (checked, declined)
