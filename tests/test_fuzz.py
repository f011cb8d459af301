"""Mutation fuzzing: a few hundred specs made by breaking the example specs, the test specs and
the bad-spec corpus in fixed, seeded ways, each run through the command line's own entry point
(`trainspec.cli.main`) in this process, under an alarm. Whatever a mutant is, trainspec must
answer with exit 0, 1 or 2, never a traceback or an internal error (70), never a hang, and every
error it prints must be located (`file:line:col: error: ...`). A few of the mutants also go
through the real console script as processes.

The mutations: byte flips, deletions, duplicated lines (duplicate keys), alias bombs (one with a
duplicated key), integers of thousands of digits (decimal, hex, zero-padded), NUL bytes, odd
unicode (bidi overrides, line separators, BOMs, invalid UTF-8), deep nesting, template
injections, long lines and long keys, keys with a newline and `::error`, tabs, spliced lines
from another spec, wrongly typed import fields (the Azure ML jobs `trainspec import` reads, with
fields of any depth given another type, a refused key, a placeholder), and the path fields (`code`, `extends`, `environment.conda_file`,
`environment.build.path`, `inputs.*.path`) and the spec argument itself pointed at a FIFO, a
device, `/dev/stdin`, a symlink loop, `/`, a NUL, a 300-byte name, a 5,000-byte path.

The seed is fixed (SEED): every run tries the same mutants, so CI does not flake. To explore,
`TRAINSPEC_FUZZ_SEED=<n> TRAINSPEC_FUZZ_COUNT=<k> pytest -q tests/test_fuzz.py`.
"""

from __future__ import annotations

import copy
import os
import random
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from conftest import Hang, in_process, REPO, trainspec_cmd, yq

SEED = int(os.environ.get("TRAINSPEC_FUZZ_SEED", "20"))
COUNT = int(os.environ.get("TRAINSPEC_FUZZ_COUNT", "320"))
PER_RUN = 10.0  # seconds of wall clock for one in-process run: a hang guard, far above a run (~50 ms)
SOURCES = sorted((REPO / "specs").glob("*.yaml")) + sorted((REPO / "tests" / "specs").glob("*.yaml")) \
    + sorted((REPO / "tests" / "bad_specs").glob("*.yaml"))
LOCATED = re.compile(r"^.+:\d+:\d+: (error|warning): ")
ADDRESS = re.compile(r" at 0x[0-9a-f]{4,}")

# what a path field is pointed at (names relative to the fuzz folder's root, see `arena`)
HOSTILE_PATHS = ["{root}/fifo.yaml", "/dev/zero", "/dev/stdin", "/dev/null", "{root}/loop-a", "/", "{root}/to-root",
                 "a\0b", "x" * 300, "/".join(["d" * 200] * 25), "{root}", "{root}/nowhere", "../../../../../../.."]
TEMPLATES = ["{{ xs|map('upper') }}", "{{ [1, 2]|map('string') }}", "{{ [vars.nope] }}", "{{ range(3) }}",
             "{{ cycler(1, 2) }}", "{{ lipsum(5) }}", "{{ ''.__class__.__mro__ }}", "{{ self }}",
             "{{ namespace() }}", "{% macro m() %}x{% endmacro %}{{ m }}", "{{ 'x'.upper }}",
             "{{ range(10**9) | list }}", "{{ 10 ** 100000 }}", "{{ 'a' * 10**8 }}", "{{ vars }}",
             "{{ nodes * 10 ** 5000 }}", "{% for i in range(100000) %}{% endfor %}x", "{{ 1 / 0 }}",
             "{{ '%09999999999d' % 1 }}", "{{ [1,2]|batch(1) }}", "{{ dict(a=1).items() }}", "{{ nope }}",
             "{% raw %}{{ x }}{% endraw %}", "{{ inputs }}", "{{ 'x' ~ none }}", "{#", "{{", "{% if %}"]
UNICODE = ["\u202e", "\u2028", "\u2029", "\ufeff", "\u0301" * 50, "\U0001f680", "\x85", "\x1b[31m", "\u200d",
           "\ud7ff", "\x7f", "\uffff"]


def run_in_process(argv: List[str], seconds: float = PER_RUN) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of main(argv) in this process, as main() wrote them."""
    done = in_process(argv, None, seconds, pipes=False)
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------- the fuzz folder


def arena(root: Path) -> None:
    """The mutants' folder: the repository's layout (specs/, tests/specs/, tests/bad_specs/, their
    `code: ../examples/...` resolving through a link), and the hostile things paths point at."""
    for folder in ("specs", "tests/specs", "tests/bad_specs", "outside"):
        (root / folder).mkdir(parents=True)
    (root / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    os.mkfifo(root / "fifo.yaml")
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    (root / "to-root").symlink_to("/", target_is_directory=True)


def mutate(rng: random.Random, text: str, others: List[str], root: Path) -> Tuple[str, str]:
    """(kind, mutated text)."""
    lines = text.splitlines(keepends=True) or ["\n"]
    kind = rng.choice(["flip", "delete", "duplicate-line", "alias-bomb", "huge-int", "nul", "unicode", "deep",
                       "template", "long-line", "long-key", "newline-key", "tab", "splice", "path-field",
                       "path-field", "template", "crlf-bom"])
    if kind == "flip":
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return kind, data.decode("utf-8", errors="surrogateescape")
    if kind == "delete":
        start = rng.randrange(len(text))
        return kind, text[:start] + text[start + rng.randint(1, 200):]
    if kind == "duplicate-line":
        i = rng.randrange(len(lines))
        return kind, "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if kind == "alias-bomb":
        depth = rng.randint(6, 12)
        bomb = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, depth))
        twice = f"env: *l{depth - 1}\n" * (2 if rng.random() < 0.5 else 1)  # a duplicated key holding it
        return kind, text + bomb + twice
    if kind == "huge-int":
        digits = rng.choice([4301, 5000, 20000, 101])
        number = rng.choice(["9" * digits, "0x" + "f" * digits, "0" * digits + "1", "-" + "1" * digits,
                             "1_" * (digits // 2) + "1"])
        found = list(re.finditer(r"(?m)(:\s+)(\d+)\s*$", text))
        if found:
            m = rng.choice(found)
            return kind, text[:m.start(2)] + number + text[m.end(2):]
        return kind, text + f"vars: {{big: {number}}}\n"
    if kind == "nul":
        i = rng.randrange(len(text))
        return kind, text[:i] + "\0" + text[i:]
    if kind == "unicode":
        i = rng.randrange(len(text))
        return kind, text[:i] + rng.choice(UNICODE) * rng.randint(1, 3) + text[i:]
    if kind == "deep":
        n = rng.choice([45, 200, 5000])
        return kind, text + "env: {A: " + "[" * n + "1" + "]" * n + "}\n"
    if kind == "template":
        template = rng.choice(TEMPLATES)
        field = rng.choice(["command", "description", "env"])
        value = '"' + template.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if field == "env":
            return kind, re.sub(r"(?m)^env:.*\n", "", text) + f"env: {{T: {value}}}\nvars: {{xs: [a, b]}}\n"
        return kind, re.sub(rf"(?m)^{field}:.*\n", "", text) + f"{field}: {value}\n"
    if kind == "long-line":
        return kind, text + "description: " + "x" * rng.choice([100_000, 900_000]) + "\n"
    if kind == "long-key":
        return kind, text + "k" * rng.choice([300, 100_000]) + ": 1\n"
    if kind == "newline-key":
        return kind, text + 'env: {"A\\n::error file=x::pwned": "1", "B\\r\\x1b[2J": "2"}\n'
    if kind == "tab":
        i = rng.randrange(len(lines))
        lines[i] = "\t" + lines[i]
        return kind, "".join(lines)
    if kind == "splice":
        other = rng.choice(others).splitlines(keepends=True) or ["\n"]
        i, j = rng.randrange(len(lines)), rng.randrange(len(other))
        return kind, "".join(lines[:i] + other[j:j + rng.randint(1, 5)] + lines[i:])
    if kind == "crlf-bom":
        return kind, "\ufeff" + text.replace("\n", "\r\n")
    # path-field: one of the fields that name a file or folder, pointed at something hostile
    target = rng.choice(HOSTILE_PATHS).format(root=root)
    value = '"' + target.replace("\\", "\\\\").replace("\0", "\\0").replace('"', '\\"') + '"'
    field = rng.choice(["code", "extends", "conda_file", "build", "input"])
    if field in ("code", "extends"):
        return kind, re.sub(rf"(?m)^{field}:.*\n", "", text) + f"{field}: {value}\n"
    body = re.sub(r"(?m)^(environment|inputs):.*\n(?:[ \t]+.*\n)*", "", text)
    if field == "conda_file":
        return kind, body + f"environment: {{image: pytorch:latest, conda_file: {value}}}\n"
    if field == "build":
        return kind, body + f"environment: {{build: {{path: {value}}}}}\n"
    return kind, body + f"inputs: {{data: {{path: {value}}}}}\n"


def mutants(root: Path) -> List[Tuple[str, Path, str]]:
    """(kind, file, command) for COUNT mutants; the same ones on every run."""
    rng = random.Random(SEED)
    texts = {source: source.read_text(encoding="utf-8", errors="replace") for source in SOURCES}
    others = list(texts.values())
    out = []
    for n in range(COUNT):
        source = rng.choice(SOURCES)
        kind, text = mutate(rng, texts[source], others, root)
        folder = root / source.parent.relative_to(REPO)
        file = folder / f"m{n:03d}-{kind}-{source.stem}.yaml"
        file.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        command = "compile" if rng.random() < 0.25 else "validate"
        out.append((kind, file, command))
    # the spec argument itself: a FIFO, a device, a loop, `/` through a link, overlong names
    for name in ["fifo.yaml", "loop-a", "to-root", "/dev/zero", "/dev/stdin", "x" * 300 + ".yaml",
                 "/".join(["d" * 200] * 25) + ".yaml", "a\0b.yaml"]:
        out.append(("argument", root / name if not name.startswith("/") else Path(name), "validate"))
    return out


def check(kind: str, file: Path, code: int, stdout: str, stderr: str) -> Optional[str]:
    """What is wrong with a run's answer, or None."""
    what = f"{kind} {file.name[:60]}: exit {code}\n{stderr[-2000:]}"
    if code not in (0, 1, 2):
        return what
    if "Traceback" in stderr or "internal error" in stderr:
        return what
    if code == 1:
        errors = [l for l in stderr.splitlines() if ": error: " in l and not l.startswith("trainspec: error: ")]
        if not errors and "trainspec: error: cannot write" not in stderr:
            return "exit 1 without a located error: " + what
        if not all(LOCATED.match(l) for l in errors):
            return "an error without file:line:col: " + what
    for line in stderr.splitlines():  # one line per diagnostic: no raw control character gets out
        if any(ord(c) < 0x20 and c != "\t" for c in line):
            return "a raw control character in a diagnostic: " + what
    return None


def test_mutants_never_crash_hang_or_give_unlocated_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    arena(tmp_path)
    monkeypatch.chdir(tmp_path)
    problems, kinds = [], {}
    out = tmp_path / "out"
    for kind, file, command in mutants(tmp_path):
        argv = [command, str(file)] + (["-o", str(out)] if command == "compile" else [])
        try:
            code, stdout, stderr = run_in_process(argv)
        except Hang as exc:
            problems.append(f"{kind} {file.name[:60]}: {exc}")
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
        problem = check(kind, file, code, stdout, stderr)
        if problem:
            problems.append(problem)
    assert problems == [], f"{len(problems)} of {sum(kinds.values())} mutants:\n\n" + "\n\n".join(problems[:20])
    assert len(kinds) >= 15, kinds  # the mutations are all exercised
    # nothing written outside -o, and no Python repr (`<generator object ... at 0x...>`) written
    assert list((tmp_path / "outside").iterdir()) == []
    for path in out.rglob("*") if out.exists() else []:
        assert not path.is_symlink(), path
        if path.is_file():
            assert not ADDRESS.search(path.read_text(errors="replace")), path


# --- hostile templates (issue 40) ------------------------------------------------------------------

# ways out of the sandbox: attributes, globals, format and attr by every name
ESCAPES = ["('{0.__init__.__globals__[os].environ}'|attr('format'))(cycler)", "cycler.__init__.__globals__.os.environ",
           "''.__class__.__mro__[1].__subclasses__()", "self._TemplateReference__context", "namespace.__init__.__globals__",
           "joiner.__init__.__globals__['os'].environ", "(name|attr('__class__'))", "name['__class__']",
           "'{0.__class__}'.format(name)", "'{x}'.format_map({'x': cycler})", "name['for' ~ 'mat']('{0!r}', cycler)",
           "'%s'|format(cycler)", "(name['format' ~ '_map'])({})", "range.__self__", "dict.__base__.__subclasses__()",
           "cycler.next.__func__.__globals__", "x.__class__", "{}.__class__.__init__.__globals__"]
# values to grow from, and what grows them
SEEDS = ["'x'", "'ab' * {n}", "range({n}) | list", "[name] * {n}", "('x' * {n}).split('x')", "[[1]] * {n}",
         "'\\t' * {n}", "name", "vars.xs", "[1, 2, 3]", "{'a': 'x' * {n}}", "namespace(a='x' * {n})"]
GROW = ["({a} ~ {b})", "({a} + {b})", "({a} * {n})", "({a} | sort)", "({a} | join({b}))", "({a} | list)",
        "({a} | map('string') | list)", "({a} | batch({n}) | list)", "({a} | unique | list)", "({a} | reverse | list)",
        "({a} | string)", "({a} | center({n}))", "({a} | indent({n}))", "({a} | wordwrap({n}))", "({a} | tojson)",
        "({a} | pprint)", "({a} | sum(start=[]))", "({a} | replace('', {b}))", "({a}).replace('', {b})",
        "({a}).expandtabs({n})", "({b}).join({a})", "({a}).ljust({n})", "('%0*d' % ({n}, 1))", "({a} | dictsort)",
        "({a} | groupby('x') | list)", "({a} | slice({n}) | list)", "({a} | xmlattr)", "({a} | urlencode)"]
NUMBERS = ["3", "10", "1000", "100000", "1000000", "10**7", "10**9", "2**40", "-1"]
BLOCKS = ["{{% set ns = namespace(a={a}) %}}{{% for i in range({n}) %}}{{% set ns.a = ns.a ~ ns.a %}}{{% endfor %}}"
          "{{{{ ns.a | length }}}}",
          "{{% set ns = namespace(a={a}) %}}{{% for i in range({n}) %}}{{% set ns.a = ns.a + ns.a %}}{{% endfor %}}"
          "{{{{ ns.a | length }}}}",
          "{{% for i in range({n}) %}}{{% for j in range({n}) %}}{{{{ {a} | length }}}}{{% endfor %}}{{% endfor %}}",
          "{{% macro m(s, k) %}}{{% if k > 0 %}}{{{{ m(s ~ s, k - 1) }}}}{{% else %}}{{{{ s | length }}}}{{% endif %}}"
          "{{% endmacro %}}{{{{ m({a}, 60) }}}}",
          "{{% set a %}}{{{{ {a} }}}}{{{{ {a} }}}}{{% endset %}}{{% set b %}}{{{{ a }}}}{{{{ a }}}}{{% endset %}}{{{{ b | length }}}}",
          "{{% set xs = [1] %}}{{% for i in range(40) %}}{{{{ xs.extend(xs) }}}}{{% endfor %}}",
          "{{% for i in range({n}) %}}{{{{ range(100000) | list | sort | first }}}}{{% endfor %}}",
          "{{% macro f(n) %}}{{{{ f(n) }}}}{{% endmacro %}}{{{{ f(1) }}}}",
          "{{{{ ((range(100000) | list) * 10) | sort | length }}}}", "{{{{ '{{:{{}}}}'.format('x', '1800000000') }}}}",
          "{{{{ {a} }}}}"]


def hostile_template(rng: random.Random, block: Optional[str] = None) -> str:
    """One template made of an escape, growth, or a block that loops, doubles or recurses (``block``:
    that one)."""
    def number() -> str:
        return rng.choice(NUMBERS)

    def value(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(SEEDS).replace("{n}", number())
        return rng.choice(GROW).format(a=value(depth - 1), b=value(depth - 1), n=number())

    kind = 1.0 if block else rng.random()
    if kind < 0.3:
        return "{{ " + rng.choice(ESCAPES) + " }}"
    if kind < 0.65:
        return "{{ " + value(rng.randint(1, 4)) + " }}"
    return (block or rng.choice(BLOCKS)).format(a=value(rng.randint(0, 2)), n=number())


def test_hostile_templates_never_escape_leak_or_outgrow_their_budget(tmp_path, monkeypatch):
    """Seeded: templates that try to leave the sandbox (attributes, globals, str.format and attr under
    every name) or to grow (`~`, `+`, `*`, filters, methods, loops, blocks, recursion, huge ranges),
    one to three in the command, env and description of a spec, through validate, plan and
    compile. The answer is exit 0, 1 or 2 with located errors, within the spec's clock (one budget
    for all its strings; compile renders the command once more per target), and no value of the
    environment is printed or written."""
    from trainspec.schema import templating

    # the clock is the one limit a template can use up whole: a shorter one keeps the run short
    monkeypatch.setattr(templating, "MAX_SECONDS", 1.0)
    MAX_SECONDS = templating.MAX_SECONDS
    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    marker = "fuzz-environ-" + "".join(random.Random(SEED).choice("abcdef0123456789") for _ in range(16))
    monkeypatch.setenv("TRAINSPEC_FUZZ_MARKER", marker)
    (tmp_path / "code").mkdir()
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED + 40)
    problems, kinds, slowest = [], set(), 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB: this process's largest size so far
    for n in range(int(os.environ.get("TRAINSPEC_FUZZ_TEMPLATES", "80"))):
        fields = {"command": "python t.py", "env": {}, "description": None}
        for _ in range(rng.randint(1, 3)):
            where = rng.choice(["command", "env", "description"])
            template = hostile_template(rng, BLOCKS[n] if n < len(BLOCKS) else None)  # each block at least once
            kinds.add(where)
            if where == "command":
                fields["command"] = "python t.py " + template
            elif where == "env":
                fields["env"][f"T{len(fields['env'])}"] = template
            else:
                fields["description"] = template
        file = tmp_path / f"t{n:03d}.yaml"
        file.write_text("version: 1\nname: t\ncode: code\nvars: {xs: ab}\n"
                        f"command: {yq(fields['command'])}\n"
                        + ("env: {" + ", ".join(f"{k}: {yq(v)}" for k, v in fields["env"].items()) + "}\n"
                           if fields["env"] else "")
                        + (f"description: {yq(fields['description'])}\n" if fields["description"] else "")
                        + "resources: {gpus_per_node: 0}\nenvironment: {image: python:3.11}\n"
                        "targets: {slurm: {partition: cpu}}\n")
        command = rng.choice(["validate", "validate", "plan", "compile"])
        out = tmp_path / f"out{n:03d}"
        argv = [command, file.name] + (["-o", str(out)] if command == "compile" else [])
        renders = 1 if command == "validate" else 2  # validation, then the command for the target
        started = time.monotonic()
        try:
            code, stdout, stderr = run_in_process(argv, seconds=renders * MAX_SECONDS + 20)
        except Hang as exc:
            problems.append(f"{file.name} {command}: {exc}\n{file.read_text()}")
            continue
        elapsed = time.monotonic() - started
        slowest = max(slowest, elapsed)
        problem = check("template", file, code, stdout, stderr)
        written = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()) if out.exists() else ""
        if problem is None and marker in stdout + stderr + written:
            problem = f"the environment leaked: exit {code}\n{(stdout + stderr)[-1500:]}"
        if problem is None and elapsed > renders * MAX_SECONDS + 3:
            problem = f"{elapsed:.1f} s"
        if problem:
            problems.append(f"{file.name} {command}: {problem}\n{file.read_text()[:1500]}")
    assert problems == [], f"{len(problems)} hostile specs:\n\n" + "\n\n".join(problems[:10])
    assert kinds == {"command", "env", "description"}
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # never gigabytes (a ~ doubling took them)
    assert grown < 512 << 10, f"the process grew by {grown >> 10} MiB"


def test_every_kind_of_mutant_through_the_console_script(tmp_path, cli_env):
    """One mutant of each hostile kind through the installed `trainspec`, as a process with a
    timeout: the in-process runs above share the answer, not the process's start or its exit."""
    arena(tmp_path)
    base = (REPO / "specs" / "ddp-torchrun.yaml").read_text()
    cases = {
        "dup-alias-bomb": base + "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 12))
        + "env: *l11\nenv: *l11\n",
        "huge-int": base.replace("nodes: 2", "nodes: " + "9" * 5000),
        "generator": base + "env: {T: \"{{ ['a']|map('upper') }}\"}\n",
        "fifo-extends": base + "extends: ../fifo.yaml\n",
        "nul-extends": base + 'extends: "a\\0b"\n',
    }
    for name, text in cases.items():
        (tmp_path / "specs" / f"{name}.yaml").write_text(text)
    runs = [[f"specs/{name}.yaml"] for name in cases] + [["fifo.yaml"], ["to-root"], ["loop-a"]]
    for args in runs:
        proc = subprocess.run([*trainspec_cmd(), "validate", *args], cwd=tmp_path, env=cli_env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
        problem = check("console", Path(args[0]), proc.returncode, proc.stdout, proc.stderr)
        assert problem is None, problem
        assert proc.returncode in (1, 2), (args, proc.stderr)


# --- links in code folders and in outputs (issue 27) ------------------------------------------------

LINK_TARGETS = ["/proc/self/environ", "{git}/config", "{outside}/secret.txt", "{outside}", "{outside}/fifo", "/etc"]
LINK_PLACES = ["code/{name}", "code/sub/{name}", "code/.{name}", "build/{name}", "build/{job}/{name}",
               "build/{job}/{target}", "build/{job}/{target}/{name}", "build/{job}/{target}/{file}", "build"]


def _link_case(rng: random.Random, root: Path, outside: Path, jobs: List[Tuple[str, str, str]], where: str) -> str:
    """One link a pull request could commit at ``where`` (one of LINK_PLACES), to a random target."""
    job, target, file = rng.choice(jobs)
    place = where.format(name=rng.choice(["env.txt", "x", "config.yaml", "ghost"]), job=job, target=target, file=file)
    link = root / place
    if link.exists() or link.is_symlink():
        shutil.rmtree(link) if link.is_dir() and not link.is_symlink() else link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(rng.choice(LINK_TARGETS).format(git=root / ".git", outside=outside), link)
    return place


def test_links_in_code_folders_and_outputs_never_leak_or_reach_outside(tmp_path, monkeypatch):
    """Seeded: a repository of the example specs (their code folders copied in, compiled to build/),
    then a link where a pull request could put one (a code folder, hidden or not; OUT/<name>,
    OUT/<name>/<target>, an output file, OUT itself) to this process's environment, .git/config,
    a secret file or folder, a FIFO. validate, compile, compile --prune, check and plan answer
    with a located error or a link finding, never a traceback or a hang; no byte from outside the
    repository reaches stdout, stderr or a file under build/, and nothing outside is written or
    deleted."""
    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    environ = Path("/proc/self/environ").read_bytes().split(b"\0")
    marker = max((e.partition(b"=")[2] for e in environ), key=len).decode("utf-8", "replace")
    secrets = ["hunter2-outside", "extraheader", marker]
    rng = random.Random(SEED)
    # every place twice (the Kubernetes spec, whose ConfigMap embeds the code folder, for the code
    # folder's places and every other time), each to a random target
    for case, where in enumerate(LINK_PLACES * int(os.environ.get("TRAINSPEC_FUZZ_LINKS", "2"))):
        root, outside = tmp_path / f"repo{case}", tmp_path / f"outside{case}"
        (outside / "kubernetes").mkdir(parents=True)
        (outside / "secret.txt").write_text("SECRET=hunter2-outside\n")
        (outside / "kubernetes" / "job.yaml").write_text("# Generated by trainspec 0 for kubernetes from specs/gone.yaml "
                                                         "(spec sha256:00)\nhunter2-outside\n")
        os.mkfifo(outside / "fifo")
        (root / "specs").mkdir(parents=True)
        spec = "k8s-ddp.yaml" if where.startswith("code") or case % 2 else rng.choice(
            ["ddp-torchrun.yaml", "hpcpack-ddp.yaml", "slurm-ddp.yaml", "ray-lightning.yaml", "mnist-lightning.yaml"])
        text = (REPO / "specs" / spec).read_text()
        folder = re.search(r"^code: \.\./examples/(\S+)", text, re.M).group(1)
        shutil.copytree(REPO / "examples" / folder, root / "code", ignore=shutil.ignore_patterns("__pycache__"))
        (root / "specs" / spec).write_text(text.replace(f"code: ../examples/{folder}", "code: ../code")
                                           .replace("conda_file: ../examples/", "conda_file: ../code/../examples/"))
        subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
        with open(root / ".git" / "config", "a") as fh:
            fh.write("[http]\n\textraheader = AUTHORIZATION: basic x\n")
        monkeypatch.chdir(root)
        code, _, err = run_in_process(["compile", "specs/", "-o", "build"])
        if code != 0:  # a spec that needs a file of examples/ besides its code folder: the link alone is the test
            shutil.rmtree(root / "build", ignore_errors=True)
        jobs = [(p.parent.parent.name, p.parent.name, p.name) for p in sorted((root / "build").glob("*/*/*"))] \
            or [("job", "kubernetes", "job.yaml")]
        place = _link_case(rng, root, outside, jobs, where)
        before = sorted(str(p) for p in outside.rglob("*"))
        contents = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
        for argv in (["validate", "specs/"], ["plan", "specs/"], ["check", "specs/", "-o", "build"],
                     ["compile", "specs/", "-o", "build"], ["compile", "specs/", "-o", "build", "--prune"]):
            try:
                code, stdout, stderr = run_in_process(argv)
            except Hang as exc:
                pytest.fail(f"{place}: {' '.join(argv)}: {exc}")
            what = f"{spec}, link at {place}: {' '.join(argv)}: exit {code}\n{stderr[-2000:]}"
            assert code in (0, 1) and "Traceback" not in stderr and "internal error" not in stderr, what
            assert not any(s in stdout or s in stderr for s in secrets), what + stdout[-2000:]
        assert sorted(str(p) for p in outside.rglob("*")) == before, place
        assert all(p.read_bytes() == data for p, data in contents.items()), place
        build = root / "build"
        for path in build.rglob("*") if build.is_dir() and not build.is_symlink() else []:
            if path.is_file() and not any(part.is_symlink() for part in [path, *path.parents] if build in part.parents):
                data = path.read_text(errors="replace")
                assert not any(s in data for s in secrets), (place, path)


# ---------------------------------------------------------------- wrongly typed import fields (issue 27)

IMPORT_JOBS = sorted((REPO / "tests" / "jobs").glob("*.yml"))
PUBLIC_JOBS = REPO.parent / "shared" / "reference" / "azureml-jobs-public"
IMPORT_COUNT = int(os.environ.get("TRAINSPEC_FUZZ_IMPORT_COUNT", "240"))
# what a field's value becomes: each type import might not expect, placeholders, pipeline bindings
WRONG_VALUES = ["x", "", 5, -1, 0, 2.5, True, None, [], [1, "a"], {}, {"a": 5}, {"a": {"b": [1]}}, "<compute name>",
                "{your environment}", "${{parent.inputs.x}}", "9" * 120, "azureml:", "file:nowhere.yml",
                {"target": "azureml:gpu", "instance_count": 2}, {"job_service_type": "ssh"}, {"type": 5}]


def _job_paths(value, path=()):
    """Every path in a job's data, containers included (the root aside)."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _job_paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _job_paths(item, path + (index,))


def test_import_of_jobs_with_wrongly_typed_fields_never_crashes(tmp_path, monkeypatch):
    """The hand-written and the published Azure ML jobs, each with one to three fields (any depth)
    given a value of another type, a key azure-ai-ml refuses, a placeholder, the preview compute
    or a path with a NUL, an overlong name or a symlink loop: `import` answers 0, 1 or 2 with located errors, never 70 or a traceback (a quarter
    with -o: the spec written, then validated)."""
    from ruamel.yaml import YAML

    from trainspec.schema.loader import load_file

    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    shutil.copytree(REPO / "tests" / "jobs", tmp_path / "jobs")
    sources = [tmp_path / "jobs" / p.name for p in IMPORT_JOBS]
    if PUBLIC_JOBS.is_dir():  # beside the clone, never copied into it
        for folder in sorted(PUBLIC_JOBS.iterdir()):
            shutil.copytree(folder, tmp_path / folder.name)
            sources += sorted((tmp_path / folder.name / "job").glob("*.yml"))
    jobs = [(source, load_file(str(source)).data) for source in sources]
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    values = WRONG_VALUES + ["a\0b", "x" * 300, str(tmp_path / "loop-a"), str(tmp_path / "loop-a" / "x")]
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    yaml = YAML()
    yaml.default_flow_style = rng.random() < 0.5
    problems, changed = [], 0
    for n in range(IMPORT_COUNT):
        source, data = rng.choice(jobs)
        job = copy.deepcopy(data)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(list(_job_paths(job)))
            node = job
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = copy.deepcopy(rng.choice(values))
            changed += 1
        file = source.with_name(f"m{n:03d}-{source.name}")
        with open(file, "w") as out:
            yaml.dump(job, out)
        argv = ["import", str(file.relative_to(tmp_path))]
        if rng.random() < 0.25:  # written, then validated as a spec
            argv += ["-o", f"spec-{n:03d}.yaml"]
        try:
            code, stdout, stderr = run_in_process(argv)
        except Hang as exc:
            problems.append(f"{file.name}: {exc}")
            continue
        problem = check("import", file, code, stdout, stderr)
        if problem:
            problems.append(problem + "\n" + file.read_text()[:1500])
    assert problems == [], f"{len(problems)} of {IMPORT_COUNT} jobs:\n\n" + "\n\n".join(problems[:10])
    assert changed >= IMPORT_COUNT


# ---------------------------------------------------------------- credential-shaped values (issue 27)

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def credential(rng: random.Random) -> Tuple[str, str]:
    """(a made-up credential of a random kind, the part of it that must never be printed)."""
    def word(n: int, alphabet: str = _ALNUM) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n)) + rng.choice("0123456789")

    import base64

    key = base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()
    tail = word(rng.randint(34, 48))
    aws = word(15, _ALNUM[:26] + _ALNUM[52:])  # 16 capitals and digits
    kind = rng.randrange(12)
    return [
        ("hf_" + tail, tail), ("gh" + rng.choice("pousr") + "_" + tail, tail), ("github_pat_" + tail, tail),
        ("AKIA" + aws, aws), ("xoxb-" + word(12, "0123456789") + "-" + tail, tail),
        ("sk-" + tail, tail), ("eyJ" + word(20) + ".eyJ" + tail + "." + word(30), tail), (key, key[:40]),
        (f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={key};EndpointSuffix=core.windows.net", key[:40]),
        (f"https://acct.blob.core.windows.net/c?sv=2022-11-02&sig={tail}", tail),
        (f"https://user:{tail}@example.com/data", tail), (f"-----BEGIN RSA PRIVATE KEY-----\n{tail}\n", tail),
    ][kind]


def credential_mutant(rng: random.Random, text: str, secret: str) -> Tuple[str, str, List[str]]:
    """(where, the spec's text with ``secret`` in it, extra arguments): by shape in env, command,
    description, vars, a literal input, a target's settings or --set; by name in env or --set."""
    from conftest import yq

    where = rng.choice(["env", "named", "command", "description", "vars", "input", "settings", "set", "set-named"])
    named = rng.choice(["HF_TOKEN", "WANDB_API_KEY", "client_secret", "DB_PASSWORD", "TOKEN", "X_PASSWD_2"])
    value = yq(secret if where not in ("named", "set-named") else secret.replace("\n", ""))

    def replaced(field: str, line: str) -> str:
        return re.sub(rf"(?m)^{field}:.*\n(?:[ \t]+.*\n)*", "", text) + line + "\n"

    if where == "env":
        return where, replaced("env", f"env: {{MODEL_{rng.randrange(100)}: {value}, NCCL_DEBUG: WARN}}"), []
    if where == "named":
        return where, replaced("env", f"env: {{{named}: {value}}}"), []
    if where == "command":
        return where, replaced("command", f"command: {yq('python train.py --token ' + secret)}"), []
    if where == "description":
        return where, replaced("description", f"description: {yq('reads ' + secret + ' at start')}"), []
    if where == "vars":
        return where, replaced("vars", f"vars: {{tok: {value}}}"), []
    if where == "input":
        return where, replaced("inputs", f"inputs: {{tok: {{value: {value}}}}}"), []
    if where == "settings":
        return where, replaced("targets", f"targets: {{kubernetes: {{namespace: ml, node_selector: {{pool: {value}}}}}}}"), []
    name = named if where == "set-named" else "MODEL_SOURCE"
    return where, text, ["--set", f"env.{name}={secret}"]


def test_credential_shaped_values_are_never_printed_and_never_compiled(tmp_path, monkeypatch):
    """A made-up credential of each kind put into a mutant of every source spec, in every place a
    spec holds a string, run through validate (every format, --strict or not), compile and plan:
    the answer is exit 1, and nothing printed or written holds the credential."""
    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    arena(tmp_path)
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED + 27)
    texts = {source: source.read_text(encoding="utf-8", errors="replace") for source in SOURCES}
    out = tmp_path / "credential-out"
    problems, places = [], set()
    for n in range(max(COUNT // 4, 24)):
        source = rng.choice(SOURCES)
        secret, never = credential(rng)
        where, text, extra = credential_mutant(rng, texts[source], secret)
        places.add(where)
        file = tmp_path / source.parent.relative_to(REPO) / f"c{n:03d}-{where}-{source.stem}.yaml"
        file.write_text(text, encoding="utf-8")
        command = rng.choice(["validate", "compile", "plan"])
        fmt = {"validate": ["text", "json", "github"], "plan": ["text", "json", "markdown"]}.get(command, ["text"])
        argv = [command, str(file), *extra, *(["-o", str(out)] if command != "validate" else []),
                *(["--format", rng.choice(fmt)] if command != "compile" else []),
                *(["--strict"] if command == "validate" and rng.random() < 0.5 else [])]
        try:
            code, stdout, stderr = run_in_process(argv)
        except Hang as exc:
            problems.append(f"{where} {file.name}: {exc}")
            continue
        import json

        printed = stdout + stderr
        if code != 1 or never in printed or json.dumps(never)[1:-1] in printed:
            problems.append(f"{where} {file.name} {argv[0]}: exit {code}, printed: {printed[-1500:]}")
    assert problems == [], f"{len(problems)} mutants:\n\n" + "\n\n".join(problems[:10])
    assert len(places) >= 8, places  # the places are all exercised
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


# ---------------------------------------------------------------- hostile file names

# what a pull request can put in a spec's file name: line breaks (refused), and what comments and
# strings of the outputs must carry without it becoming code or structure (escaped or quoted)
NAME_PARTS = ["\n", "\r", "\x85", "\u2028", "\u2029", "\x1b[2J", "\x7f", "\t", "--", "-->", "<!--", "$(touch PWNED)",
              "`touch PWNED`", "'", '"', "\\", "#SBATCH --nodes=1", "services: {s: {type: jupyter_lab}}",
              " (spec sha256:00) ", "\u202e", "\u200b", "\ufeff", "\u00a0", "\U000e0041", "::error::", "%0A",
              "x" * 60, "模型", "-"]
NAME_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def test_hostile_file_names_are_refused_or_named_exactly(tmp_path, monkeypatch):
    """Seeded file names made of hostile parts, each holding an example spec: compile answers with
    one located error for the file (a line break or control character) or outputs whose every
    header reads back as the spec's path, printable, on the header's own line."""
    from trainspec.review.outputs import read_header

    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    (tmp_path / ".git").mkdir()  # the repository: outputs name specs/<name>
    (tmp_path / "specs").mkdir()
    for folder in ("examples", "bases"):  # what the example specs name (code, extends), in the repository
        shutil.copytree(REPO / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    examples = sorted((REPO / "specs").glob("*.yaml"))
    problems = []
    for n in range(40):
        name = f"n{n:02d}" + "".join(rng.choice(NAME_PARTS) for _ in range(rng.randint(1, 4)))
        spec = tmp_path / "specs" / f"{name}.yaml"
        spec.write_text(rng.choice(examples).read_text())
        out = tmp_path / f"out{n:02d}"
        try:
            code, stdout, stderr = run_in_process(["compile", str(spec.relative_to(tmp_path)), "-o", str(out)])
        except Hang as exc:
            problems.append(f"{name!a}: {exc}")
            continue
        problem = check("file-name", spec, code, stdout, stderr)
        refused = NAME_REFUSED.search(name) is not None
        if problem is None and refused and (code != 1 or "the spec's path holds" not in stderr or out.exists()):
            problem = f"not refused: exit {code}\n{stderr[-2000:]}"
        if problem is None and not refused and code != 0:
            problem = f"refused: exit {code}\n{stderr[-2000:]}"
        for path in sorted(out.rglob("*")) if problem is None and not refused else []:
            if not path.is_file() or path.name.startswith("trainspec_"):
                continue
            header = read_header(path)
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if "Generated by trainspec" in line]
            if header is None or header.spec != f"specs/{name}.yaml" or len(lines) != 1 or not lines[0].isprintable():
                problem = f"{path.relative_to(out)}: header {header} in {lines!a}"
                break
        if problem:
            problems.append(f"{name!a}: {problem}")
        spec.unlink()
    assert problems == [], "\n\n".join(problems[:10])


# --- team catalogs (issue 40) ---------------------------------------------------------------------

CATALOG = """region: eastus
computes:
  gpu-cluster: Standard_ND96isr_H100_v5
prices:
  Standard_ND96isr_H100_v5: {pay_as_you_go: 90.0, spot: 30.0}
  Standard_NC48ads_A100_v4: {pay_as_you_go: 7.5}
"""
PRICE_VALUES = ["1e308", "1e309", "-1e308", "-1", ".inf", "-.inf", ".nan", ".NaN", "'12'", "twelve", "1e-320", "0",
                "1" + "0" * 400, "0x10", "true", "null", "[1, 2]", "{a: {b: {c: 1}}}", "[" * 60 + "1" + "]" * 60,
                "1000.0001", "999.99"]
REGIONS = ["West US", "", "eastus2", "a" * 500, "1abc", "[eastus]", "\u202eeastus", "westus2", "{x: 1}", ".inf"]
SIZES = ["Standard_NC4as_T4_v3", "Standard_Nope_v9", "5", "''", "../../etc/passwd", "[a, b]", ".nan", "standard_nd96isr_h100_v5"]
INF_OR_NAN = re.compile(r"(?<![a-z])(-?inf|nan)(?![a-z])", re.IGNORECASE)


def catalog_mutant(rng: random.Random) -> Tuple[str, str]:
    """(kind, the text of a team catalog) with one or two of: a price that is huge, negative,
    infinite, not a number, text, deep; a region; a size map entry; a duplicated key."""
    text, kinds = CATALOG, []
    for _ in range(rng.randint(1, 2)):
        kind = rng.choice(["price", "price", "region", "size", "duplicate", "deep"])
        kinds.append(kind)
        if kind == "price":
            key = rng.choice(["pay_as_you_go: 90.0", "spot: 30.0", "pay_as_you_go: 7.5"])
            text = text.replace(key, key.split(":")[0] + ": " + rng.choice(PRICE_VALUES))
        elif kind == "region":
            text = text.replace("region: eastus", f"region: {yaml_quoted(rng.choice(REGIONS))}")
        elif kind == "size":
            text = text.replace("gpu-cluster: Standard_ND96isr_H100_v5", f"gpu-cluster: {rng.choice(SIZES)}")
        elif kind == "duplicate":
            line = rng.choice([line for line in text.splitlines() if line])
            text = text.replace(line + "\n", line + "\n" + line + "\n", 1)
        else:
            text += "skus:\n  Standard_ND96isr_H100_v5: " + "{a: " * 80 + "1" + "}" * 80 + "\n"
    return "+".join(kinds), text


def yaml_quoted(value: str) -> str:
    """A value as a YAML double-quoted scalar when it is text (so a region may hold anything)."""
    import json

    return value if value.startswith(("[", "{", ".")) else json.dumps(value)


def test_mutated_team_catalogs_through_check_plan_and_review(tmp_path, monkeypatch):
    """Seeded team catalogs (prices huge, negative, infinite, nan, text, deep; a region; a size
    map; a duplicated key), in the repository's root or as a new catalog nearer the specs that
    shadows it, through validate, check, plan and review --git: exit 0, 1 or 2, every error
    located, never `inf` or `nan` printed (no `$inf/h`), each run bounded (PER_RUN)."""
    monkeypatch.delenv("TRAINSPEC_DEBUG", raising=False)
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    for name in ("mnist-lightning.yaml", "single-node.yaml", "slurm-ddp.yaml"):
        shutil.copy(REPO / "specs" / name, root / "specs" / name)
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "trainspec-skus.yaml").write_text(CATALOG + "partitions:\n  gpu: Standard_ND96isr_H100_v5\n")
    monkeypatch.chdir(root)

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=root, check=True,
                       capture_output=True)
    git("init", "-q", "-b", "main")  # first: outputs name their spec from the repository's root
    assert run_in_process(["compile", "specs/", "-o", "build/"])[0] == 0
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    rng = random.Random(SEED)
    problems, kinds = [], set()
    for n in range(int(os.environ.get("TRAINSPEC_FUZZ_CATALOGS", "14"))):
        kind, text = catalog_mutant(rng)
        shadow = rng.random() < 0.4
        if n == 0:  # always tried: the price whose total overflows (2 nodes x 1e308 was `$inf/h`)
            kind, text = "price", CATALOG.replace("pay_as_you_go: 90.0", "pay_as_you_go: 1e308")
        where = root / ("specs" if shadow else ".") / "trainspec-skus.yaml"
        where.write_text(text + ("partitions:\n  gpu: Standard_ND96isr_H100_v5\n" if "partitions" not in text else ""))
        os.utime(where, ns=(n * 10**9, n * 10**9))  # a new stamp each time: the catalog cache reads it again
        kinds.add(kind + (" (shadowing)" if shadow else ""))
        for argv in (["validate", "specs/"], ["check", "specs/", "--out", "build/"], ["plan", "specs/"],
                     ["review", "--git", "main", "specs/"], ["plan", "--git", "main", "specs/", "--format", "json"]):
            try:
                code, stdout, stderr = run_in_process(argv)
            except Hang as exc:
                problems.append(f"{kind} {argv[0]}: {exc}\n{text}")
                continue
            problem = check(f"{kind} {argv[0]}", where, code, stdout, stderr)
            said = INF_OR_NAN.search(stdout + stderr)
            if problem is None and said:
                problem = f"{kind} {argv[0]}: prints {said.group(0)!r}: ...{(stdout + stderr)[max(0, said.start() - 200):said.end() + 50]}"
            if problem:
                problems.append(f"{problem}\n{text}")
        if shadow:
            where.unlink()
        git("checkout", "-q", "--", "trainspec-skus.yaml")
    assert problems == [], f"{len(problems)} problems:\n\n" + "\n\n".join(problems[:8])
    assert len(kinds) >= 6, kinds
