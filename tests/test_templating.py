"""Templates: the fast path for plain `{{ name }}` renders exactly what sandboxed Jinja2 does."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, ts

from trainspec.schema import templating
from trainspec.schema.templating import MAX_STEPS

CONTEXT = templating.context(name="job", nodes=2, gpus_per_node=4, procs_per_node=4, world_size=8, backend="nccl",
                             inputs={"mnist": "${{inputs.mnist}}"}, outputs={"ckpt": "${{outputs.ckpt}}"})


def jinja(text):
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True) \
        .from_string(text).render(**CONTEXT)


@pytest.mark.parametrize("text", [
    "python train.py --num_nodes {{ nodes }} --devices {{gpus_per_node}} --data {{ inputs.mnist }}",
    "{{name}}-{{ world_size }}\n",
    "out={{ outputs.ckpt }} backend={{ backend }}",
    "no template at all",
])
def test_fast_path_matches_jinja(text):
    assert templating.render(text, CONTEXT) == jinja(text)


@pytest.mark.parametrize("text", [
    "{{ nodes * procs_per_node }}",
    "{% if nodes > 1 %}multi{% else %}single{% endif %}",
    "{{ name | upper }}",
])
def test_full_jinja_for_everything_else(text):
    assert templating.render(text, CONTEXT) == jinja(text)


@pytest.mark.parametrize("text, message", [
    ("{{ nodez }}", "undefined template name: nodez"),
    ("{{ inputs.minst }}", "undefined template name: inputs.minst (the spec's inputs: mnist)"),
    ("{{ nodez | upper }}", "undefined template name: nodez"),
    ("{{ outputs.x }}", "undefined template name: outputs.x (the spec's outputs: ckpt)"),
])
def test_undefined_names_are_errors(text, message):
    with pytest.raises(templating.TemplateProblem) as err:
        templating.render(text, CONTEXT)
    assert err.value.message == message


def test_sandbox_blocks_attribute_escapes():
    with pytest.raises(templating.TemplateProblem):
        templating.render("{{ name.__class__.__mro__[1].__subclasses__() }}", CONTEXT)


# --- limits: a short template cannot make validation run for minutes or fill the memory ------------

BOMBS = {
    "range": ("{{ range(10**9) | list | length }}", "template not allowed: range() given 1,000,000,000"),
    "range items": ("{{ range(200000) | list | length }}", "template too big: Range too big"),
    "power": ("{{ 10 ** 100000 }}", "template not allowed: 10 ** 100000 is too big"),
    "repetition": ("{{ 'a' * 100000000 }}", "template not allowed: repetition of 1 items 100,000,000 times"),
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "template not allowed: the spec's templates run more than 200,000 steps"),
    "output": ("{% for i in range(50000) %}{{ 'x' * 100 }}{% endfor %}",
               "template not allowed: the template renders more than 1,048,576 characters"),
    "filter width": ("{{ 'a' | center(100000000) }}", "template not allowed: filter center given 100,000,000"),
    "format width": ("{{ '%0100000000d' % 1 }}", "template not allowed: %-format given a format width"),
    "str.format width": ("{{ '{:>100000000}'.format(1) }}",
                         "template not allowed: the attribute 'format' is not available to templates"),
    # issue 40: sizes built by ~, + and filters are bounded as * is (each took seconds or gigabytes)
    "sort of a million": ("{{ ((range(100000) | list) * 10) | sort | length }}",
                          "template not allowed: repetition of 100,000 items 10 times"),
    "sort of a million characters": ("{{ ('x' * 1000000) | sort | length }}",
                                     "template not allowed: filter sort given a text of 1,000,000 characters"),
    "format width as text": ("{{ '{:{}}'.format('x', '1800000000') }}",
                             "template not allowed: the attribute 'format' is not available to templates"),
    "doubling by ~": ("{% set ns = namespace(a='x') %}{% for i in range(40) %}{% set ns.a = ns.a ~ ns.a %}"
                      "{% endfor %}{{ ns.a | length }}", "template not allowed: ~ makes a value of more than"),
    "doubling by +": ("{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = ns.a + ns.a %}"
                      "{% endfor %}{{ ns.a | length }}", "template not allowed: + makes 131,072 items"),
    "a list printed long": ("{{ [('x' * 1000000)] * 100000 }}", "template not allowed: * makes a value of more than"),
    "a block": ("{% set a %}{{ 'x' * 600000 }}{{ 'x' * 600000 }}{% endset %}{{ a | length }}",
                "template not allowed: a block makes more than 1,048,576 characters"),
    "a list grown in place": ("{% set xs = [1] %}{% for i in range(30) %}{{ xs.extend(xs) }}{% endfor %}",
                              "template not allowed: extend() makes 131,072 items"),
    "split": ("{{ ('x' * 1000000).split('x') | length }}", "template not allowed: split() makes 1,000,001 items"),
    "sum of lists": ("{{ ([[1]] * 1000) | sum(start=[]) }}", "template not allowed: filter sum adds numbers"),
    "join of a long list": ("{% set s = 'x' * 600000 %}{{ [s, s] | join }}",
                            "template not allowed: filter join is given a value of more than"),
    "replace everywhere": ("{{ ('x' * 1000000).replace('', 'y' * 1000000) | length }}",
                           "template too big: it needs more than 256 MiB of memory"),
    "expanded tabs": ("{{ ('\\t' * 1000).expandtabs(1000000) | length }}",
                      "template too big: it needs more than 256 MiB of memory"),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "template recursion too deep"),
    "division": ("{{ 1 / 0 }}", "template failed: ZeroDivisionError: division by zero"),
    "type": ("{{ 'a' + 1 }}", "template failed: TypeError"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_template_over_a_limit_is_a_located_error(tmp_path, name):
    """Through the real command line: one located error on `command`, exit 1, no traceback. (The
    subprocess timeout in conftest.run only turns a hang into a failure; nothing here is timed.)"""
    template, message = BOMBS[name]
    (tmp_path / "code").mkdir()
    (tmp_path / "spec.yaml").write_text(
        "version: 1\nname: t\ncode: code\n"
        f"command: {json.dumps('python t.py ' + template)}\n"
        "resources: {gpus_per_node: 0}\nenvironment: {image: python:3.11}\n"
        "targets: {azureml: {compute: cpu-cluster}}\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"spec.yaml:4:10: error: command: {message}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


@pytest.mark.parametrize("text", [
    "{{ '%05d' % nodes }} {{ 'v%s-%3s' % (2, name) }} {{ name | center(11) }} {{ 'v' ~ nodes ~ [1] }}",
    "{{ (range(5) | list) + [nodes] }} {{ [name] * 3 + ['x'] }} {{ range(1000) | list | sort | reverse | first }}",
    "{% set xs = [] %}{% for i in range(3) %}{{ xs.append(i) }}{% endfor %}{{ xs | join(' ') }}",
    "{% set b %}{{ name }}-{{ nodes }}{% endset %}{{ b }} {% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(1) ~ m(2) }}",
    "{{ 2 ** 10 }} {{ range(3) | join(',') }} {{ '-' * 5 }} {{ [nodes] * 3 }}",
    "{% for i in range(world_size) %}--rank{{ i }} {% endfor %}",
])
def test_templates_within_the_limits_render_as_jinja_does(text):
    assert templating.render(text, CONTEXT) == jinja(text)


# --- what a template may print: values, never a Python object's repr ------------------------------

OBJECTS = {
    "generator": ("{{ ['a', 'b'] | map('upper') }}", "the template renders a Python generator object, not a value"),
    "batch": ("{{ [1, 2] | batch(1) }}", "the template renders a Python generator object, not a value"),
    "macro": ("{% macro m() %}x{% endmacro %}{{ m }}", "the template renders a Python Macro object, not a value"),
    "method": ("{{ (name).upper }}", "the template renders a Python builtin_function_or_method object, not a value"),
    "address as text": ("{{ (name).upper | string }}", "the template renders a Python object's memory address"),
    "address joined": ("{{ 'x' ~ cycler(1) }}", "the template renders a Python object's memory address"),
    "cycler": ("{{ cycler(1, 2) }}", "the template renders a Python Cycler object, not a value"),
    "range": ("{{ range(3) }}", "the template renders a Python range object, not a value"),
    "undefined in a list": ("{{ [1, vars.nope] }}", "undefined template name: "),
    "items": ("{{ {'a': 1}.items() }}", "the template renders a Python dict_items object, not a value"),
}


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_a_template_that_renders_an_object_is_an_error(name):
    """Bug: `{{ xs|map('upper') }}` rendered `<generator object sync_do_map at 0x7f...>` into the job:
    not what was meant, and different bytes on every compile (so `check` failed right after
    `compile`). Every `{{ }}` must give text, a number, a boolean, none, or lists/mappings of them."""
    text, message = OBJECTS[name]
    with pytest.raises(templating.TemplateProblem) as err:
        templating.render(text, CONTEXT)
    assert err.value.message.startswith(message), err.value.message
    # values and containers of values still render exactly as Jinja does
    text = "{{ [nodes, 'a', none, true, 1.5] }} {{ {'k': [1]} }} {{ ['a'] | map('upper') | join(' ') }}"
    assert templating.render(text, CONTEXT) == jinja(text)


def test_compile_refuses_a_generator_in_the_command_and_writes_nothing(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "spec.yaml").write_text(
        "version: 1\nname: t\ncode: code\nvars: {xs: ab}\n"
        "command: \"python t.py {{ vars.xs | map('upper') }}\"\n"
        "resources: {gpus_per_node: 0}\nenvironment: {image: python:3.11}\n"
        "targets: {azureml: {compute: cpu-cluster}}\n")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "spec.yaml:5:10: error: command: the template renders a Python generator object, not a value " \
           "(hint: add `| list` or `| join(' ')` after the filter)" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


# --- issue 40: templates cannot escape, and cost bounded time and memory ---------------------------

CVE = "{{ ('{0.__init__.__globals__[os].environ}'|attr('format'))(cycler) }}"
REACHING = {
    "the escape of jinja2 3.1.5": CVE,
    "attr": "{{ name | attr('upper') }}",
    "format filter": "{{ '%s-%s' | format(name, nodes) }}",
    "str.format": "{{ 'v{}'.format(nodes) }}",
    "format_map": "{{ '{n}'.format_map({'n': nodes}) }}",
    "format by subscript": "{{ name['format'](1) }}",
    "format by a computed name": "{{ name['for' ~ 'mat'](1) }}",
    "format_map by a computed name": "{{ (name['format' ~ '_map'])({}) }}",
    "in a branch never taken": "{% if false %}{{ name | attr('x') }}{% endif %}",
    "the width as text": "{{ '{:{}}'.format('x', '1800000000') }}",
}


@pytest.mark.parametrize("name", sorted(REACHING))
def test_attr_format_and_format_map_are_refused_in_every_form(name):
    """Bug: with jinja2 3.1.5 (which pyproject allowed), CVE printed the runner's whole environment
    into job.sbatch and the PR comment. trainspec refuses the attr and format filters and
    str.format/format_map itself -- by name in the template, and at run time under a name the
    template computes -- so no version of Jinja's own handling of them is ever reached (on 3.1.6
    `'v{}'.format(2)` renders; here it is an error)."""
    with pytest.raises(templating.TemplateProblem) as err:
        templating.render(REACHING[name], CONTEXT)
    assert err.value.message.startswith("template not allowed: ") and "is not available to templates" in \
        err.value.message, err.value.message
    assert err.value.hint == templating.REACHING_HINT


def test_the_escape_is_a_located_error_and_prints_nothing_of_the_environment(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "spec.yaml").write_text(
        "version: 1\nname: t\ncode: code\n"
        f"command: {json.dumps('python t.py ' + CVE)}\n"
        "resources: {gpus_per_node: 0}\nenvironment: {image: python:3.11}\n"
        "targets: {slurm: {partition: cpu}}\n")
    env = {**os.environ, "RUNNER_MARKER": "marker-7f3a9c-of-the-runner"}
    for command in (["validate", "spec.yaml"], ["compile", "spec.yaml", "-o", "out"], ["plan", "spec.yaml"]):
        proc = ts(*command, cwd=tmp_path, env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "spec.yaml:4:10: error: command: template not allowed: the filter 'attr' is not available to " \
               "templates (hint: templates have no str.format" in proc.stderr, proc.stderr
        assert "marker-7f3a9c" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_an_older_jinja2_is_refused_at_start(tmp_path):
    """A jinja2 older than 3.1.6 first on the path (a stand-in package saying 3.1.5, as an old
    install would): every command refuses to start, in one line, exit 3 -- even for a spec with no
    template, before anything is read."""
    (tmp_path / "jinja2").mkdir()
    (tmp_path / "jinja2" / "__init__.py").write_text('__version__ = "3.1.5"\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for command in (["validate", "specs/ddp-torchrun.yaml"], ["compile", "specs/ddp-torchrun.yaml", "-o", str(tmp_path / "out")]):
        proc = subprocess.run([sys.executable, "-m", "trainspec.cli", *command], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert proc.stderr.splitlines() == [
            "trainspec: error: jinja2 3.1.5 is installed, and trainspec needs jinja2 3.1.6 or newer: an older one "
            "lets a template escape its sandbox and read the environment (CVE-2025-27516); "
            "pip install 'jinja2>=3.1.6'"], proc.stderr
        assert proc.stdout == ""
    assert not (tmp_path / "out").exists()
    assert templating.outdated_jinja() is None  # the one installed here is new enough


# (template, what refuses it): the cases, each taking seconds or gigabytes before
BOUNDED = {
    "sort of a million items": ("{{ ((range(100000) | list) * 10) | sort | length }}", "repetition of 100,000 items"),
    "sort of a million characters": ("{{ ('x' * 1000000) | sort | length }}", "filter sort given a text"),
    "a width given as text": ("{{ '{:{}}'.format('x', '1800000000') }}", "is not available to templates"),
    "a ~ a doubling": ("{% set ns = namespace(a='x' * 1000) %}{% for i in range(40) %}{% set ns.a = ns.a ~ ns.a %}"
                       "{% endfor %}{{ ns.a | length }}", "~ makes a value of more than"),
    "a + a doubling": ("{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = ns.a + ns.a %}"
                       "{% endfor %}{{ ns.a | length }}", "+ makes 131,072 items"),
    "a block doubling": ("{% set a %}{{ 'x' * 1000 }}{% endset %}{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}"
                         "{% else %}{{ s | length }}{% endif %}{% endmacro %}{{ d(a, 40) }}", "makes a value of more than"),
    "a filter's growth": ("{% set s = 'x' * 600000 %}{{ ['a', 'b', 'c'] | map('upper') | join(s) | length }}",
                          "filter join makes a value of more than"),
}


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_growth_and_sorting_are_refused_within_a_fraction_of_a_second_and_small(name):
    """Each refused before it costs: well under the 5 s clock (13 s for the sort before), and
    megabytes, not the gigabytes `~` doubling and the width took (tracemalloc's peak)."""
    import time
    import tracemalloc

    template, words = BOUNDED[name]
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(templating.TemplateProblem) as err:
            templating.render(template, CONTEXT)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert words in err.value.message, err.value.message
    assert err.value.hint in (templating.LIMITS_HINT, templating.REACHING_HINT)
    assert "the spec's templates run longer" not in err.value.message  # refused by size, not by the clock
    assert elapsed < templating.MAX_SECONDS and peak < 64 << 20, (elapsed, peak)


def test_a_spec_has_one_budget_for_all_its_strings(tmp_path):
    """Steps, the clock and what is built are counted for the spec, not per string: two env values
    each within the steps alone are over them together (the second one is the error)."""
    loop = "{% for i in range(45000) %}{% endfor %}x"
    alone = templating.Budget()
    templating.render(loop, CONTEXT, alone)
    assert MAX_STEPS / 2 < MAX_STEPS - alone.steps < MAX_STEPS, alone.steps  # more than half each
    (tmp_path / "code").mkdir()
    spec = ("version: 1\nname: t\ncode: code\ncommand: python t.py\n"
            "resources: {gpus_per_node: 0}\nenvironment: {image: python:3.11}\n"
            "targets: {slurm: {partition: cpu}}\n")
    (tmp_path / "one.yaml").write_text(spec + f"env: {{A: {json.dumps(loop)}}}\n")
    assert ts("validate", "one.yaml", cwd=tmp_path).returncode == 0
    (tmp_path / "two.yaml").write_text(spec + f"env:\n  A: {json.dumps(loop)}\n  B: {json.dumps(loop)}\n")
    proc = ts("validate", "two.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0] == (
        "two.yaml:10:6: error: env.B: template not allowed: the spec's templates run more than 200,000 steps "
        f"(hint: {templating.LIMITS_HINT})"), proc.stderr
    # the memory: a spec's templates build 16 MiB in all, however the strings share it
    big = "{% for i in range(6) %}{{ ('x' * 1000000) | length }}{% endfor %}"
    budget = templating.Budget()
    templating.render(big, CONTEXT, budget)
    templating.render(big, CONTEXT, budget)
    with pytest.raises(templating.TemplateProblem) as err:
        templating.render(big, CONTEXT, budget)
    assert err.value.message.startswith("template not allowed: the spec's templates build more than 16 MiB in all")
    # the clock: a sort of 100,000 items at a time, within every size, stops at the spec's seconds
    with pytest.raises(templating.TemplateProblem) as err:
        templating.render("{% for i in range(1000) %}{{ range(100000) | list | sort | first }}{% endfor %}",
                          CONTEXT, templating.Budget(seconds=0.3, built=1 << 40))
    assert err.value.message == "template not allowed: the spec's templates run longer than 0.3 s"
