"""Templates: the fast path for plain `{{ name }}` renders exactly what sandboxed Jinja2 does."""

import pytest

from trainspec.schema import templating

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
