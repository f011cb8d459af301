"""The loader: ruamel.yaml's YAML 1.2 round-trip loader, one path for every document (issue 12
retired the libyaml fast path: it bought ~8 ms of a cold compile and ~1.6x batch throughput,
both beyond their targets without it; benchmarks/run.py, README "Speed").

These tests pin what a spec means (YAML 1.2, not 1.1), that every key and value has its
position, and that every error is located.
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


def _documents():
    files = sorted(SPECS.glob("*.yaml")) + sorted((REPO / "tests" / "bad_specs").glob("*.yaml"))
    texts = {f.name: f.read_text(encoding="utf-8", errors="replace") for f in files}
    # a merged key (`<<: *b`) has no place of its own in the text: its errors point at the mapping
    texts.update({f"probe: {k}": v for k, v in PROBES.items() if k not in ("two documents", "merge")})
    return texts


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, path + (index,))
    yield path


@pytest.mark.parametrize("name", sorted(_documents()))
def test_every_key_and_value_has_its_own_position(name):
    try:
        doc = loader.load_bytes(_documents()[name].encode(), name)
    except SpecError:
        return  # a bad spec: its located error is pinned by tests/bad_specs
    for path in _leaves(doc.data):
        if path:
            assert path in doc.positions.values, (name, path)
            if isinstance(path[-1], str):
                assert path in doc.positions.keys, (name, path)


def test_positions_are_where_the_text_is():
    doc = loader.load_bytes(PROBES["nested"].encode(), "p.yaml")
    assert doc.positions.keys[("a", "b", "f")] == (4, 5)
    assert doc.positions.values[("a", "b", "c", 2, "d")] == (3, 19)
    doc = loader.load_bytes(PROBES["anchors"].encode(), "p.yaml")
    assert doc.data["use"] == {"x": 1, "y": [1, 2]} and doc.positions.values[("use",)] == (1, 7)


def test_yaml_1_2_meanings():
    # `yes`/`On` stay strings, 012 is an integer, a flow colon is text, merge keys merge
    doc = loader.load_bytes(PROBES["scalars"].encode(), "p.yaml")
    assert (doc.data["k"], doc.data["l"], doc.data["j"]) == ("yes", "On", 12)
    assert loader.load_bytes(PROBES["flow colon (1.2 only)"].encode(), "p.yaml").data == {
        "environment": {"image": "pytorch:latest"}}
    assert loader.load_bytes(PROBES["merge"].encode(), "p.yaml").data["use"] == {"x": 1, "y": 2}
    assert loader.load_bytes(PROBES["date"].encode(), "p.yaml").data == {"when": "2024-01-01"}


def test_errors_are_located():
    for text, fragment in (("a: 1\na: 2\n", 'duplicate key "a"'),
                           ("a: " + "[" * 60 + "]" * 60 + "\n", "nested too deeply"),
                           ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
                               f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
                               for i in range(6)), "expands to more than"),
                           (PROBES["two documents"], "invalid YAML")):
        with pytest.raises(SpecError) as caught:
            loader.load_bytes(text.encode(), "x.yaml")
        diagnostic = caught.value.diagnostics[0]
        assert fragment in diagnostic.message and diagnostic.line is not None, diagnostic
