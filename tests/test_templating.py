"""Templates: the fast path for plain `{{ name }}` renders exactly what sandboxed Jinja2 does."""

import json

import pytest

from conftest import ts

from trainspec.spec import templating

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
                     "template not allowed: the template runs more than 200,000 steps"),
    "output": ("{% for i in range(50000) %}{{ 'x' * 100 }}{% endfor %}",
               "template not allowed: the template renders more than 1,048,576 characters"),
    "filter width": ("{{ 'a' | center(100000000) }}", "template not allowed: filter center given 100,000,000"),
    "format width": ("{{ '%0100000000d' % 1 }}", "template not allowed: %-format given a format width"),
    "str.format width": ("{{ '{:>100000000}'.format(1) }}", "template not allowed: format() given a format width"),
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
    "{{ '%05d' % nodes }} {{ 'v{}-{:>3}'.format(2, name) }} {{ name | center(11) }}",
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
