"""Jinja2 templating of spec strings, sandboxed, with every undefined name an error.

``{{ inputs.x }}`` renders to each target's own reference (Azure ML: ``${{inputs.x}}``),
so the context is built per target from a `Refs` callback. Jinja2 is imported only when a
string actually contains template syntax: most specs compile without paying for it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import re

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
        return env.from_string(text).render(**context)
    except jinja2.UndefinedError as exc:
        names = ", ".join(sorted(k for k in context if not k.startswith("_")))
        raise TemplateProblem(f"undefined template name: {_undefined_text(exc, context)}",
                              f"defined: {names}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateProblem(f"template syntax error: {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateProblem(f"template not allowed: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateProblem(f"template error: {exc}") from None


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


def _environment(cls, undefined):
    env = _ENV_CACHE.get(cls)
    if env is None:
        env = cls(undefined=undefined, autoescape=False, keep_trailing_newline=True)
        _ENV_CACHE[cls] = env
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
