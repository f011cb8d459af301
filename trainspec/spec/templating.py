"""Jinja2 templating of spec strings, sandboxed, with every undefined name an error.

``{{ inputs.x }}`` renders to each target's own reference (Azure ML: ``${{inputs.x}}``),
so the context is built per target from a `Refs` callback. Jinja2 is imported only when a
string actually contains template syntax: most specs compile without paying for it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Mapping, Optional

from trainspec.core.patterns import Lazy

TEMPLATE_MARKS = ("{{", "{%", "{#")
# `{{ name }}` / `{{ inputs.x }}` and nothing else: rendered without importing Jinja2 (it costs
# more than the rest of a compile). Anything else -- filters, tests, blocks -- goes to Jinja2.
_SIMPLE = re.compile(r"\{\{\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*\}\}")


class TemplateProblem(Exception):
    """A template that does not render: message for the user, hint optional."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


def is_template(text: str) -> bool:
    return any(mark in text for mark in TEMPLATE_MARKS)


def render(text: str, context: Mapping[str, Any]) -> str:
    """Render ``text`` in a sandbox. Plain strings come back unchanged without importing Jinja."""
    if "${{" in text:
        raise TemplateProblem(
            "`${{...}}` is Azure ML's own syntax and would be rendered twice",
            "write {{ inputs.x }} / {{ outputs.x }}: trainspec renders them to each target's reference")
    if not is_template(text):
        return text
    if not is_template(_SIMPLE.sub("", text)):
        return _SIMPLE.sub(lambda m: _lookup(m.group(1), context), text)
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    env = _environment(SandboxedEnvironment, jinja2.StrictUndefined)
    try:
        return _render_within_limits(env.from_string(text), context)
    except TemplateProblem:
        raise
    except jinja2.UndefinedError as exc:
        names = ", ".join(sorted(k for k in context if not k.startswith("_")))
        raise TemplateProblem(f"undefined template name: {_undefined_text(exc, context)}",
                              f"defined: {names}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateProblem(f"template syntax error: {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateProblem(f"template not allowed: {exc}", LIMITS_HINT) from None
    except jinja2.TemplateError as exc:
        raise TemplateProblem(f"template error: {exc}") from None
    except OverflowError as exc:  # the sandbox's own range limit, and float overflow
        raise TemplateProblem(f"template too big: {exc}", LIMITS_HINT) from None
    except RecursionError:
        raise TemplateProblem("template recursion too deep", LIMITS_HINT) from None
    except Exception as exc:  # the user's expression failed: 1/0, 'a' + 1, int('x') ...
        raise TemplateProblem(f"template failed: {type(exc).__name__}: {exc}") from None


# --- limits: a spec string renders to a command line, not to a denial of service ------------------

MAX_OUTPUT = 1 << 20  # characters a template may render to (a spec file itself is at most 1 MiB)
MAX_STEPS = 200_000  # template-code lines executed (loop bodies included), a deterministic budget
MAX_INT_BITS = 1 << 16  # results of ** (about 20,000 digits)
LIMITS_HINT = (f"a template renders at most {MAX_OUTPUT:,} characters in {MAX_STEPS:,} steps, "
               "ranges of at most 100,000 items; compute big values in the job, not in the spec")


# a width in a %-format or a str.format spec: `%0100000000d`, `{:>100000000}`
_HUGE_WIDTH = Lazy(r"(?:%[-+ #0]*|\{[^{}]*:[^{}]*?)\d{8,}")


def _check_sizes(what: str, values) -> None:
    """Numbers handed to a function, a filter or a format are how a short template asks for a huge
    string (`'x' | center(10**9)`, `lipsum(10**6)`, `'%09999999999d' % 1`): refuse them up front."""
    from jinja2.exceptions import SecurityError

    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OUTPUT:
            raise SecurityError(f"{what} given {value:,} (more than {MAX_OUTPUT:,})")
        if isinstance(value, str) and _HUGE_WIDTH.search(value):
            raise SecurityError(f"{what} given a format width over 10,000,000")


def _limited_sandbox(sandbox):
    """Jinja's sandbox, plus limits on what it leaves unbounded: repetition, powers, widths."""
    from jinja2.exceptions import SecurityError

    class Limited(sandbox):
        intercepted_binops = frozenset({"*", "**", "%"})

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.filters = {name: _checked(name, f) for name, f in self.filters.items()}
            del self.globals["lipsum"]  # paragraphs of lorem ipsum: no use in a command, slow when big

        def call(__self, __context, __obj, *args, **kwargs):  # every call a template makes
            name = getattr(__obj, "__name__", "a call").replace("safe_range", "range")
            _check_sizes(f"{name}()", [*args, *kwargs.values()])
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value):  # 'x{:>9}'.format(...): the format string's widths
            fmt = super().wrap_str_format(value)
            if fmt is not None:
                _check_sizes("format()", [value.__self__])
            return fmt

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for seq, times in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(times, int) \
                            and len(seq) * times > MAX_OUTPUT:
                        raise SecurityError(f"repetition of {len(seq):,} items {times:,} times")
            elif operator == "%":
                if isinstance(left, str):
                    _check_sizes("%-format", [left, *(right if isinstance(right, tuple) else [right])])
            elif isinstance(left, int) and isinstance(right, int) and right > 0 \
                    and max(abs(left).bit_length() - 1, 0) * right > MAX_INT_BITS:
                raise SecurityError(f"{left} ** {right} is too big")
            return super().call_binop(context, operator, left, right)

    return Limited


def _checked(name: str, function):
    import functools

    @functools.wraps(function)  # keeps Jinja's pass_context / pass_environment marks
    def checked(*args, **kwargs):
        _check_sizes(f"filter {name}", [*args[1:], *kwargs.values()])
        return function(*args, **kwargs)

    return checked


def _render_within_limits(template, context: Mapping[str, Any]) -> str:
    """Render, counting output characters and template-code steps: over a limit is an error, so
    no spec can make validation run for minutes or fill the memory."""
    import sys

    from jinja2.exceptions import SecurityError

    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
            if steps > MAX_STEPS:
                raise SecurityError(f"the template runs more than {MAX_STEPS:,} steps")
        return count

    def in_template(frame, event, arg):  # trace only the code Jinja compiled from the template
        return count if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    sys.settrace(in_template)
    try:
        chunks, size = [], 0
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise SecurityError(f"the template renders more than {MAX_OUTPUT:,} characters")
            chunks.append(chunk)
        return "".join(chunks)
    finally:
        sys.settrace(previous)


def _lookup(dotted: str, context: Mapping[str, Any]) -> str:
    """What Jinja2 renders for ``{{ a.b }}`` with StrictUndefined, for plain mappings."""
    value: Any = context
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping) or part not in value:
            if depth == 0:
                names = ", ".join(sorted(context))
                raise TemplateProblem(f"undefined template name: {part}", f"defined: {names}")
            namespace = parts[depth - 1]
            have = ", ".join(sorted(value)) if isinstance(value, Mapping) else "none"
            raise TemplateProblem(f"undefined template name: {namespace}.{part} (the spec's {namespace}: {have or 'none'})",
                                  f"defined: {', '.join(sorted(context))}")
        value = value[part]
    return str(value)


_ENV_CACHE: Dict[Any, Any] = {}
_PLAIN = (str, int, float, type(None))  # bool is an int


def _only_values(value: Any) -> Any:
    """What every ``{{ ... }}`` hands to the output: text, numbers, booleans, and lists, tuples and
    mappings of them. Anything else would print as its Python repr -- `<generator object ... at
    0x7f...>` for `xs|map(...)`, a macro, a function, a leftover undefined inside a list --
    which is neither what the user meant nor the same bytes twice: an error on the field."""
    from jinja2 import Undefined

    def check(item: Any, depth: int) -> None:
        if isinstance(item, Undefined):
            item._fail_with_undefined_error()  # StrictUndefined: "undefined template name: ..."
        if isinstance(item, _PLAIN):
            return
        if isinstance(item, (list, tuple)) and depth < 20:
            for member in item:
                check(member, depth + 1)
            return
        if isinstance(item, dict) and depth < 20:
            for key, member in item.items():
                check(key, depth + 1)
                check(member, depth + 1)
            return
        kind = type(item).__name__
        hint = ("add `| list` or `| join(' ')` after the filter" if kind == "generator"
                else "render text, numbers or lists of them")
        raise TemplateProblem(f"the template renders a Python {kind} object, not a value", hint)

    if isinstance(value, Undefined):
        return value  # printing it raises UndefinedError, reported as an undefined name
    check(value, 0)
    if isinstance(value, str) and _ADDRESS.search(value):  # `obj | string`, `'x' ~ obj`
        raise TemplateProblem("the template renders a Python object's memory address "
                              f"({_ADDRESS.search(value).group(0).strip()}): different on every run",
                              "render text, numbers or lists of them")
    return value


_ADDRESS = Lazy(r" at 0x[0-9a-fA-F]{4,}>")



def _environment(sandbox, undefined):
    """One limited sandbox for the process: made on the first template that needs Jinja2."""
    env = _ENV_CACHE.get(sandbox)
    if env is None:
        env = _limited_sandbox(sandbox)(undefined=undefined, autoescape=False, keep_trailing_newline=True,
                                        finalize=_only_values)
        _ENV_CACHE[sandbox] = env
    return env


def _undefined_text(exc: Exception, context: Mapping[str, Any]) -> str:
    message = str(exc)
    # "'dict object' has no attribute 'x'" -> say which namespace, and what it has
    if "has no attribute" in message:
        attr = message.rsplit("'", 2)[-2] if message.count("'") >= 2 else message
        for namespace in ("inputs", "outputs", "vars"):
            members = context.get(namespace)
            if isinstance(members, Mapping) and attr not in members:
                have = ", ".join(sorted(members)) or "none"
                return f"{namespace}.{attr} (the spec's {namespace}: {have})"
        return attr
    return message.replace(" is undefined", "").strip("'")


def context(*, name: str, nodes: int, gpus_per_node: int, procs_per_node: int, world_size: int,
            backend: str, inputs: Mapping[str, str], outputs: Mapping[str, str],
            variables: Mapping[str, Any] = {}) -> Dict[str, Any]:
    """The names a template may use. ``inputs``/``outputs`` map names to target references."""
    return {
        "name": name,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "procs_per_node": procs_per_node,
        "world_size": world_size,
        "backend": backend,
        "inputs": dict(inputs),
        "outputs": dict(outputs),
        "vars": dict(variables),
    }


Refs = Callable[[str, str], str]  # (kind "inputs"|"outputs", name) -> reference text
