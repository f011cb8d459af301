"""The loader: ruamel.yaml's YAML 1.2 round-trip loader decides what a document means; libyaml's
parser (ruamel.yaml.clib) reads the documents it reads exactly the same way (issue 30: parsing
was most of a cold `check`; issue 12 had retired an earlier fast path that chose by what libyaml
accepted). The last tests hold the two paths equal, data and positions, over every YAML file in
the repository and the fuzzer's mutants.

These tests pin what a spec means (YAML 1.2, not 1.1), that every key and value has its
position, and that every error is located.
"""

import os

import pytest

from conftest import cpu_bound, no_hang, REPO, SPECS
from trainspec.core.diagnostics import SpecError, error
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
    # what the loader refuses after parsing, each at its place, the first in the document's order
    "huge integer": "a: 1\nb: " + "9" * 150 + "\nc: x\n",
    "null key": "a: 1\n~: 2\n",
    "huge integer before a null key": "x:\n  b: " + "9" * 150 + "\n  ~: 2\n",
    "null key before a huge integer": "x:\n  ~: 2\n  b: " + "9" * 150 + "\n",
    "huge integer key": "a:\n  " + "9" * 150 + ": 1\n",
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


# ---------------------------------------------------------------- hostile input (issue 20)


def _error(text: str):
    with no_hang(), pytest.raises(SpecError) as caught:
        loader.load_bytes(text.encode(), "x.yaml")
    return caught.value.diagnostics[0]


def test_a_duplicate_key_names_the_line_the_key_was_first_written_on():
    """Bug: `resources:\\n  sku: x\\n  nodes: 2\\n  nodes: 4` said "first defined on line 1": ruamel's
    context mark is where the mapping starts, not where the key first was."""
    d = _error("version: 1\nresources:\n  sku: x\n  nodes: 2\n  nodes: 4\n")
    assert (d.line, d.col) == (5, 3) and d.message == 'duplicate key "nodes" (first defined on line 4)', d


def test_a_duplicated_key_holding_an_alias_bomb_fails_fast():
    """Bug: ruamel formats both values into its duplicate-key message; for `env: *l11` twice, an
    alias chain of 10**11 items, that format never ends (the spec is 1 KiB)."""
    bomb = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 12))
    d = _error(bomb + "env: *l11\nenv: *l11\n")
    assert d.message.startswith('duplicate key "env" (first defined on line 13)') and d.line == 14, d


@pytest.mark.parametrize("written, digits", [("9" * 5000, 5000), ("0x" + "f" * 5000, 5000), ("-" + "1" * 4301, 4301),
                                             ("0" * 4400 + "2", 4401), ("1" * 101, 101)])
def test_integers_of_any_length_are_located_errors_at_their_field(written, digits):
    """Bug: `nodes: 999...9` (over 4,300 digits) ended in "internal error: ValueError: Exceeds the
    limit (4300 digits) for integer string conversion" (exit 70); hex digits have no such limit
    in int() and failed later, wherever the number was printed."""
    d = _error(f"version: 1\nresources:\n  nodes: {written}\n")
    assert (d.path, d.line, d.col) == (("resources", "nodes"), 3, 10), d
    assert d.message == f"an integer of {digits:,} digits is out of range", d
    assert "at most 100 digits" in d.hint
    # a hundred digits is still a number (the schema says what range the field takes)
    assert loader.load_bytes(f"a: {'9' * 100}\n".encode(), "x.yaml").data["a"] == int("9" * 100)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-stdin", "directory", "symlink-loop", "nul", "long-part",
                                  "long-path"])
def test_only_regular_files_are_read_and_nothing_blocks(tmp_path, kind):
    """Bug: a FIFO as a spec blocked forever in open(); /dev/zero was read; a symlink loop ended in
    "internal error: RuntimeError: Symlink loop" (Path.resolve), a NUL in "ValueError"."""
    path = str(tmp_path / "spec.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "dev-stdin":  # by its name: what fd 0 is (a tty, a pipe, a file) does not matter
        path = "/dev/stdin"
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "symlink-loop":
        os.symlink("other.yaml", path)
        os.symlink("spec.yaml", tmp_path / "other.yaml")
    elif kind == "nul":
        path += "\0x"
    elif kind == "long-part":
        path = str(tmp_path / ("x" * 300))
    else:
        path = "/".join([str(tmp_path)] + ["d" * 200] * 25)
    expected = {"fifo": "is a FIFO (named pipe), not a regular file", "dev-zero": "is a device, not a regular file",
                "dev-stdin": "names a device or a process's stream, not a file", "directory": "is a directory, not a spec file",
                "symlink-loop": "is a symbolic link loop", "nul": "the path contains a NUL character",
                "long-part": "has a part of 300 bytes", "long-path": "a path has at most 4095"}[kind]
    with no_hang(), pytest.raises(SpecError) as caught:
        loader.load_file(path)
    d = caught.value.diagnostics[0]
    assert expected in d.message and (d.file, d.line, d.col) == (path, 1, 1), d


@pytest.mark.parametrize("opening", ["{", "[", "[{a: "])
def test_deep_flow_nesting_is_refused_at_the_first_bracket_too_deep_before_it_costs_seconds(opening):
    """Bug: 10,000 `{` took 7 s of CPU (ruamel's cost grows with the square of the flow depth)
    before the nesting limit was checked on the parsed document, and the error said 1:1. Now the
    scanner stops at the bracket that opens level 41, located; 100,000 of them cost nothing more."""
    text = "x: " + opening * 100_000 + "\n"
    with cpu_bound(5):
        d = _error(text)
    assert d.message == "document is nested too deeply (limit 40 levels)", d
    brackets = [i for i, c in enumerate(text) if c in "[{"]
    assert (d.line, d.col) == (1, brackets[40] + 1), d  # the 41st


# ---------------------------------------------------------------- libyaml's parser (issue 30)


def _fail(message, hint=None, line=1, col=1):
    return SpecError([error((), message, hint).at("x.yaml", line, col)])


_fail.file = "x.yaml"


def _read(parse, text: str):
    """(data, key positions, value positions) as the loader builds them from ``parse``'s result,
    ('declined',) or ('error', the exception's type)."""
    fail = _fail
    try:
        parsed = parse(text)
        if parsed is loader._DECLINED:
            return ("declined",)
        positions = loader.Positions()
        data = loader._walk(parsed, (), positions, [loader.MAX_NODES], 0, fail)
        return (repr(data), positions.keys, positions.values)
    except SpecError as exc:  # the message and its place too: the fast path orders its errors itself
        return ("error", [(d.message, d.path, d.line, d.col) for d in exc.diagnostics])
    except (loader.NestedTooDeeply, loader._DuplicateKey, RecursionError) as exc:
        return ("error", type(exc).__name__)


def _same_as_ruamel(name: str, text: str) -> bool:
    """libyaml's path either declines ``text`` or reads exactly what ruamel's reads, places
    included; True when it read it."""
    fast = _read(loader._libyaml_parse, text)
    if fast == ("declined",):
        return False
    assert fast == _read(lambda t: loader._ruamel_parse(t, _fail), text), name
    return True


def _repository_yaml():
    found = []
    for pattern in ("*.yaml", "*.yml"):
        found += [p for p in REPO.rglob(pattern) if not {".git", ".venv", ".venvs", "site"} & set(p.parts)]
    return sorted(found)


def test_libyaml_reads_every_yaml_file_of_the_repository_as_ruamel_does():
    taken = [p.relative_to(REPO) for p in _repository_yaml()
             if _same_as_ruamel(str(p), p.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff"))]
    taken += [name for name, text in PROBES.items() if _same_as_ruamel(name, text)]
    # the fast path is real: every example spec takes it, and so do the ordinary probes
    assert {p for p in SPECS.glob("*.yaml")} <= {REPO / p for p in taken if not isinstance(p, str)}
    assert {"scalars", "strings", "nested", "long", "indentless seq"} <= set(taken)
    assert {"huge integer", "null key before a huge integer", "huge integer before a null key"} <= set(taken)
    # and what YAML 1.1 reads otherwise is ruamel's: a directive, an alias, a merge key, a date, a
    # colon in a flow mapping (libyaml refuses it), an empty value
    assert not {"directive", "anchors", "merge", "date", "flow colon (1.2 only)", "empty values"} & set(taken)


def test_a_document_over_the_node_limit_fails_where_ruamel_s_read_fails(monkeypatch):
    """libyaml's path reads the whole document before it counts; the error is still the one
    ruamel's path meets first: the node limit, or a bad value or key met before it."""
    monkeypatch.setattr(loader, "MAX_NODES", 50)
    huge = "9" * 150
    for before in range(46, 52):
        items = ", ".join(["1"] * before)
        for text in (f"a: [{items}, {huge}, 1]\n", f"a: [{items}]\n~: 1\n", f"a: [{items}]\nb: {{~: 1}}\n"):
            assert _same_as_ruamel(text, text), text


def test_libyaml_reads_the_fuzzers_mutants_as_ruamel_does(tmp_path):
    """Every mutant test_fuzz.py makes (byte flips, unicode, deep nesting, huge integers, long
    keys, splices...) is declined or read the same; the 900 KB long lines are left out (ruamel
    takes seconds over each), the 100 KB ones are in."""
    import test_fuzz

    test_fuzz.arena(tmp_path)
    taken = files = 0
    for kind, file, _ in test_fuzz.mutants(tmp_path):
        if kind == "argument":
            continue
        files += 1
        text = file.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
        if len(text) <= 200_000:
            taken += _same_as_ruamel(file.name, text)
    # a good share of the mutants are still YAML libyaml reads (the comparison is not vacuous);
    # the share moves with the seeded mutants, which change as specs are added to what they break
    assert taken > files // 4, (taken, files)


def test_the_same_bytes_are_parsed_once_per_process(monkeypatch):
    """check reads each spec twice (its bases, then the spec) and a shared base once per spec:
    the second read of the same bytes under the same name is the first one's result, in a
    Document of its own (compose fills a composed Document's origins, never a loaded one's)."""
    parsed = []
    real = loader._parse
    monkeypatch.setattr(loader, "_parse", lambda text, fail: parsed.append(text) or real(text, fail))
    raw = b"version: 1\nname: once-" + os.urandom(8).hex().encode() + b"\n"
    first, second = loader.load_bytes(raw, "a.yaml"), loader.load_bytes(raw, "a.yaml")
    assert len(parsed) == 1 and first is not second and first.data == second.data
    first.origins[("name",)] = first
    assert second.origins == {}
    loader.load_bytes(raw, "b.yaml")  # another name: its own Document, messages name it
    assert len(parsed) == 2
