"""Jinja2 templating of spec strings, sandboxed, with every undefined name an error.

``{{ inputs.x }}`` renders to each target's own reference (Azure ML: ``${{inputs.x}}``),
so the context is built per target from a `Refs` callback. Jinja2 is imported only when a
string actually contains template syntax: most specs compile without paying for it.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from time import monotonic
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


def render(text: str, context: Mapping[str, Any], budget: Optional["Budget"] = None) -> str:
    """Render ``text`` in a sandbox. Plain strings come back unchanged without importing Jinja.

    ``budget``: what the templates of one spec may still spend, shared by all its strings (a new
    one, a whole spec's, when not given)."""
    if "${{" in text:
        raise TemplateProblem(
            "`${{...}}` is Azure ML's own syntax and would be rendered twice",
            "write {{ inputs.x }} / {{ outputs.x }}: trainspec renders them to each target's reference")
    if not is_template(text):
        return text
    if not is_template(_SIMPLE.sub("", text)):
        return _SIMPLE.sub(lambda m: _lookup(m.group(1), context), text)
    jinja2 = _jinja()
    from jinja2.sandbox import SandboxedEnvironment

    env = _environment(SandboxedEnvironment, jinja2.StrictUndefined)
    try:
        with _spending(budget or Budget()) as spent, _traced(spent):  # compiling too: it runs Python
            template = env.from_string(_refuse_reaching(env, text))
            return _render_within_limits(template, context, spent)
    except TemplateProblem:
        raise
    except _OverBudget as exc:
        raise TemplateProblem(f"template not allowed: {exc}", LIMITS_HINT) from None
    except MemoryError:  # the address-space bound (_address_space_bound) refused an allocation
        raise TemplateProblem(f"template too big: it needs more than {MAX_MEMORY >> 20} MiB of memory",
                              LIMITS_HINT) from None
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


# --- the Jinja2 this runs on ---------------------------------------------------------------------

# 3.1.5 and older let a template reach str.format through the attr filter, and from there any
# attribute (CVE-2025-27516: `{{ ('{0.__init__.__globals__[os].environ}'|attr('format'))(cycler) }}`
# printed the process's environment); trainspec refuses format and attr itself too (REACHING)
JINJA_NEEDED = (3, 1, 6)


def outdated_jinja() -> Optional[str]:
    """What is wrong with the Jinja2 that templates would run on (one line), or None when it is
    3.1.6 or newer. Read from the module's own file, without importing it (that costs more
    than the rest of a compile): the version of the package Python would import, not of the
    installed distribution's metadata, which can differ (a `jinja2` folder earlier on the path)."""
    import importlib.util
    import sys

    module = sys.modules.get("jinja2")
    version = getattr(module, "__version__", None) if module is not None else None
    if version is None:
        found = importlib.util.find_spec("jinja2")
        if found is None or not found.origin:
            return "jinja2 is not installed"
        try:  # `__version__ = "3.1.6"`, a line of its own (no pattern: every start runs this)
            with open(found.origin, encoding="utf-8") as file:
                lines = file.read(16384).splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        written = [line.partition("=")[2].strip().strip("\"'") for line in lines
                   if line.startswith("__version__") and "=" in line]
        version = written[0] if written else getattr(_import_jinja(), "__version__", "unknown")
    return _version_problem(str(version))


def _version_problem(version: str) -> Optional[str]:
    numbers = tuple(int(part) if part.isdigit() else 0 for part in version.split(".")[:3])
    if numbers >= JINJA_NEEDED:
        return None
    needed = ".".join(map(str, JINJA_NEEDED))
    return (f"jinja2 {version} is installed, and trainspec needs jinja2 {needed} or newer: an older one "
            f"lets a template escape its sandbox and read the environment (CVE-2025-27516); "
            f"pip install 'jinja2>={needed}'")


def _import_jinja():
    import jinja2

    return jinja2


def _jinja():
    """jinja2, refused when older than 3.1.6 (the command line refuses it at start; this is for
    any other caller)."""
    jinja2 = _import_jinja()
    problem = _version_problem(str(getattr(jinja2, "__version__", "0")))
    if problem:
        raise TemplateProblem(problem)
    return jinja2


# --- limits: a spec string renders to a command line, not to a denial of service ------------------

MAX_OUTPUT = 1 << 20  # characters a template may render to (a spec file itself is at most 1 MiB)
MAX_TEXT = MAX_OUTPUT  # characters of any text a template builds, or hands to a filter, a call or `~`
MAX_ITEMS = 100_000  # items of any list, tuple or mapping it builds (as many as a range may hold)
MAX_STEPS = 200_000  # template-code lines executed (loop bodies included), a deterministic budget
MAX_BUILT = 16 << 20  # characters built in all by a spec's templates (every `~`, filter, call, output)
MAX_SECONDS = 5.0  # wall clock for all of a spec's templates: a bound on what the counts above miss
MAX_MEMORY = 256 << 20  # address space a render may add (Linux): a bound on what the counts above miss
MAX_INT_BITS = 1 << 16  # results of ** and * (about 20,000 digits)
LIMITS_HINT = (f"a spec's templates run at most {MAX_STEPS:,} steps and {MAX_SECONDS:g} s, build at most "
               f"{MAX_BUILT >> 20} MiB in all, and values of at most {MAX_TEXT:,} characters and "
               f"{MAX_ITEMS:,} items; compute big values in the job, not in the spec")
REACHING_HINT = ("templates have no str.format, format_map, `format` or `attr` (they reach past the sandbox): "
                 "join pieces with ~ ('v' ~ n) or use %-format ('%05d' % n)")
# what reaches an object's attributes by a name given as text, or formats with one: refused
REACHING = frozenset({"attr", "format", "format_map"})
# filters that go through their input item by item: a text input's items are its characters
_ITEMWISE = frozenset({"batch", "dictsort", "first", "groupby", "join", "last", "list", "map", "max", "min",
                       "random", "reject", "rejectattr", "reverse", "select", "selectattr", "slice", "sort",
                       "sum", "unique", "items", "tojson", "pprint", "xmlattr", "urlencode"})


class Budget:
    """What the templates of one spec may spend, all its strings together: template-code steps,
    characters built (the memory bound: every text, list and mapping a template makes is
    counted once more each time it is made) and seconds of wall clock (counted only while
    rendering). validate gives one to every string of a spec; a render without one gets a
    whole spec's."""

    def __init__(self, steps: Optional[int] = None, built: Optional[int] = None, seconds: Optional[float] = None):
        self.steps = MAX_STEPS if steps is None else steps
        self.built = MAX_BUILT if built is None else built
        self.seconds = MAX_SECONDS if seconds is None else seconds
        self.allowed = (self.built, self.seconds)  # what the messages say: the fields above are what is left
        self.deadline = 0.0  # while rendering: the monotonic clock's time when the seconds run out

    def spend_built(self, size: int, what: str) -> None:
        self.built -= size
        if self.built < 0:
            raise _OverBudget(f"the spec's templates build more than {self.allowed[0] >> 20} MiB in all "
                              f"(at {what})")

    def check_clock(self) -> None:
        if monotonic() > self.deadline:
            raise _OverBudget(f"the spec's templates run longer than {self.allowed[1]:g} s")


class _OverBudget(BaseException):
    """A budget ran out. A BaseException: no `except Exception` inside Jinja or a filter can
    swallow it and let the template run on."""


_CURRENT: list = []  # the budget being spent: the one render in progress (renders do not nest)


@contextmanager
def _spending(budget: Budget):
    """Spend ``budget`` while the body runs: its clock runs only meanwhile (_traced counts the
    steps and watches the clock; _built counts what is built), within _address_space_bound."""
    started = monotonic()
    budget.deadline = started + budget.seconds
    _CURRENT.append(budget)
    try:
        with _address_space_bound():
            yield budget
    finally:
        _CURRENT.pop()
        budget.seconds -= monotonic() - started


@contextmanager
def _address_space_bound():
    """While a template renders, the process may grow by MAX_MEMORY at most: one allocation a
    short template asks for (`s.replace('', s)`, a str.join with a long separator) fails with a
    MemoryError instead of taking gigabytes. The counts (MAX_TEXT, MAX_BUILT) are what usually
    refuses; this bounds what they miss. Linux only (RLIMIT_AS is not enforced elsewhere)."""
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        bound = size + MAX_MEMORY
        if (soft != resource.RLIM_INFINITY and soft <= bound) or (hard != resource.RLIM_INFINITY and hard < bound):
            bound = None
        else:
            resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    except (ImportError, OSError, ValueError, IndexError):
        bound = None
    try:
        yield
    finally:
        if bound is not None:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _budget() -> Optional[Budget]:
    return _CURRENT[-1] if _CURRENT else None


# a width in a %-format (`%0100000000d`), or in a format spec handed on as text (`{:>100000000}`)
_HUGE_WIDTH = Lazy(r"(?:%[-+ #0]*|\{[^{}]*:[^{}]*?)\d{8,}")


def _check_sizes(what: str, values) -> None:
    """Numbers handed to a function, a filter or a format are how a short template asks for a huge
    string (`'x' | center(10**9)`, `lipsum(10**6)`, `'%09999999999d' % 1`): refuse them up front.
    So is a value that would print as more than MAX_TEXT characters (`[s] * 100000` of a long
    `s`): handed to a filter, a call or `~`, it would be printed whole."""
    from jinja2.exceptions import SecurityError

    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OUTPUT:
            raise SecurityError(f"{what} given {value:,} (more than {MAX_OUTPUT:,})")
        if isinstance(value, str) and _HUGE_WIDTH.search(value):
            raise SecurityError(f"{what} given a format width over 10,000,000")
        _check_value(what, value, "is given")


def _check_value(what: str, value: Any, verb: str = "makes") -> int:
    """The characters ``value`` prints as (about), refused over MAX_TEXT, and its items over
    MAX_ITEMS; ``what`` made it, or (``verb`` "is given") is handed it."""
    from jinja2.exceptions import SecurityError

    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > MAX_ITEMS:
        raise SecurityError(f"{what} {verb} {len(value):,} items (more than {MAX_ITEMS:,})")
    size = _printed_size(value, MAX_TEXT)
    if size > MAX_TEXT:
        raise SecurityError(f"{what} {verb} a value of more than {MAX_TEXT:,} characters")
    return size


def _built(what: str, value: Any) -> Any:
    """``value``, just made by ``what``: checked (_check_value) and counted against the budget."""
    size = _check_value(what, value)
    budget = _budget()
    if budget is not None:
        budget.spend_built(size, what)
    return value


def _printed_size(value: Any, limit: int) -> int:
    """About how many characters ``str(value)`` would be -- counted, not printed, and no further
    than ``limit``: a list holding one long text 100,000 times is small in memory and 100,000
    times that text in print. Every part counts at least one, so the walk visits ``limit``
    parts at most (a list that holds itself counts as too big)."""
    from collections.abc import Mapping as AnyMapping, MappingView

    from jinja2.utils import Namespace

    total, stack, seen = 0, [value], 0
    while stack:
        item = stack.pop()
        kind = type(item)  # the usual kinds first, by type: this runs for every item of a list
        if kind is str:
            total += len(item)
        elif kind is int:
            total += item.bit_length() // 3 + 2
        elif kind is list or kind is tuple:
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif kind is dict:
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, str):
            total += len(item)
        elif isinstance(item, (bytes, bytearray)):
            total += 4 * len(item)
        elif isinstance(item, (list, tuple, set, frozenset, MappingView)):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, AnyMapping):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, Namespace):
            stack.append(item._Namespace__attrs)  # printed as <Namespace {...}>
        else:
            total += 16  # a number, none, a boolean, an object printed as its type's name
        seen += 1
        if total > limit:
            return total
        if seen & 0xFFFF == 0:
            budget = _budget()
            if budget is not None:
                budget.check_clock()
    return total


def _refuse_reaching(env, text: str):
    """The template's syntax tree, refused when it names what reaches past the sandbox -- the
    `attr` or `format` filter, a `format` or `format_map` attribute -- in any branch, taken or
    not (the sandbox refuses them at run time too, under any name a template computes)."""
    from jinja2 import nodes

    tree = env.parse(text)
    for node in tree.find_all((nodes.Filter, nodes.Getattr, nodes.Getitem)):
        name = node.name if isinstance(node, nodes.Filter) else node.attr if isinstance(node, nodes.Getattr) \
            else node.arg.value if isinstance(node.arg, nodes.Const) else None
        if name in REACHING:
            kind = "filter" if isinstance(node, nodes.Filter) else "attribute"
            raise TemplateProblem(f"template not allowed: the {kind} {name!r} is not available to templates",
                                  REACHING_HINT)
    return tree


def _limited_sandbox(sandbox):
    """Jinja's sandbox, plus limits on what it leaves unbounded: the size of every value a
    template builds (`~`, `+`, `*`, `%`, filters, calls, blocks), powers, widths, and no
    str.format, format_map, `format` or `attr` at all."""
    from jinja2.compiler import CodeGenerator
    from jinja2.exceptions import SecurityError
    from jinja2.runtime import markup_join, str_join

    class Generator(CodeGenerator):
        def visit_Concat(self, node, frame):  # `a ~ b`: sized before it is joined
            volatile = frame.eval_ctx.volatile
            self.write("environment.joined(%s, (" % ("context.eval_ctx.autoescape" if volatile else
                                                     repr(bool(frame.eval_ctx.autoescape)),))
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    def refused(name: str):
        def refuse(*args, **kwargs):
            raise TemplateProblem(f"template not allowed: the filter {name!r} is not available to templates",
                                  REACHING_HINT)
        return refuse

    class Limited(sandbox):
        intercepted_binops = frozenset({"*", "**", "%", "+"})
        code_generator_class = Generator

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.filters = {name: refused(name) if name in REACHING else _checked(name, f)
                            for name, f in self.filters.items()}
            del self.globals["lipsum"]  # paragraphs of lorem ipsum: no use in a command, slow when big

        @staticmethod
        def concat(parts):  # a block's, a macro's or a call block's output, joined
            parts = list(parts)
            size = sum(map(len, parts))
            if size > MAX_TEXT:
                raise SecurityError(f"a block makes more than {MAX_TEXT:,} characters")
            return _built("a block", "".join(parts))

        def joined(self, autoescape, values):  # `a ~ b ~ c`
            _check_sizes("~", values)
            if sum(_printed_size(v, MAX_TEXT) for v in values) > MAX_TEXT:
                raise SecurityError(f"~ makes a value of more than {MAX_TEXT:,} characters")
            return _built("~", (markup_join if autoescape else str_join)(values))

        def is_safe_attribute(self, obj, attr, value):
            if attr in REACHING:
                raise TemplateProblem(f"template not allowed: {type(obj).__name__}.{attr} is not available "
                                      "to templates", REACHING_HINT)
            return super().is_safe_attribute(obj, attr, value)

        def wrap_str_format(self, value):  # 'x{}'.format, reached by any name: refused, never wrapped
            name = getattr(value, "__name__", None)
            if name in REACHING and isinstance(getattr(value, "__self__", None), str):
                raise TemplateProblem(f"template not allowed: str.{name} is not available to templates",
                                      REACHING_HINT)
            return None

        def call(__self, __context, __obj, *args, **kwargs):  # every call a template makes
            name = getattr(__obj, "__name__", "a call").replace("safe_range", "range")
            _check_sizes(f"{name}()", [*args, *kwargs.values()])
            result = super().call(__context, __obj, *args, **kwargs)
            grown = getattr(__obj, "__self__", None)  # xs.append(x), d.update(e): what it grew
            if isinstance(grown, (list, dict, set)) and len(grown) > MAX_ITEMS:
                raise SecurityError(f"{name}() makes {len(grown):,} items (more than {MAX_ITEMS:,})")
            return _built(f"{name}()", result)

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                if all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)) \
                        and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
                    raise SecurityError(f"{left} * {right} is too big")
                # a list's items are references: its length bounds the memory, and _built its print
                for seq, times in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(times, int) \
                            and len(seq) * times > (MAX_TEXT if isinstance(seq, str) else MAX_ITEMS):
                        raise SecurityError(f"repetition of {len(seq):,} items {times:,} times")
            elif operator == "+":
                if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)) \
                        and len(left) + len(right) > (MAX_TEXT if isinstance(left, str) else MAX_ITEMS):
                    raise SecurityError(f"+ makes {len(left) + len(right):,} "
                                        f"{'characters' if isinstance(left, str) else 'items'}")
            elif operator == "%":
                if isinstance(left, str):
                    _check_sizes("%-format", [left, *(right if isinstance(right, tuple) else [right])])
            elif isinstance(left, int) and isinstance(right, int) and right > 0 \
                    and max(abs(left).bit_length() - 1, 0) * right > MAX_INT_BITS:
                raise SecurityError(f"{left} ** {right} is too big")
            return _built(operator, super().call_binop(context, operator, left, right))

    return Limited


def _checked(name: str, function):
    import functools

    @functools.wraps(function)  # keeps Jinja's pass_context / pass_environment marks
    def checked(*args, **kwargs):
        values = [a for a in args if not _is_jinja_context(a)]
        if name == "sum" and not isinstance(kwargs.get("start", values[2] if len(values) > 2 else 0), (int, float)):
            raise _security("filter sum adds numbers (a start that is not a number adds lists, in "
                            "quadratic time)")
        if name in _ITEMWISE and values and isinstance(values[0], str) and len(values[0]) > MAX_ITEMS:
            raise _security(f"filter {name} given a text of {len(values[0]):,} characters to go through "
                            f"one by one (more than {MAX_ITEMS:,})")
        _check_sizes(f"filter {name}", [*values[1:], *kwargs.values()])
        if values:
            _check_value(f"filter {name}", values[0], "is given")
        return _built(f"filter {name}", function(*args, **kwargs))

    return checked


def _is_jinja_context(value: Any) -> bool:
    """The environment, context or eval context Jinja passes a filter first (pass_environment...)."""
    from jinja2 import Environment
    from jinja2.nodes import EvalContext
    from jinja2.runtime import Context

    return isinstance(value, (Environment, Context, EvalContext))


def _security(message: str):
    from jinja2.exceptions import SecurityError

    return SecurityError(message)


def _render_within_limits(template, context: Mapping[str, Any], budget: Budget) -> str:
    """Render, counting output characters (steps and the clock: _traced): over a limit is an
    error, so no spec can make validation run for minutes or fill the memory."""
    chunks, size = [], 0
    for chunk in template.generate(**context):
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise _OverBudget(f"the template renders more than {MAX_OUTPUT:,} characters")
        chunks.append(chunk)
    budget.spend_built(size, "the output")
    return "".join(chunks)


@contextmanager
def _traced(budget: Budget):
    """Python's trace hook while the body runs: every line of template code is a step, and every
    function called (a filter, a sort's key, Jinja's own code) looks at the clock -- a long sort or
    a filter's loop stops there, between two items."""
    import sys

    def count(frame, event, arg):
        if event == "line":
            budget.steps -= 1
            if budget.steps < 0:
                raise _OverBudget(f"the spec's templates run more than {MAX_STEPS:,} steps")
            budget.check_clock()
        return count

    def in_template(frame, event, arg):  # trace only the code Jinja compiled from the template
        budget.check_clock()
        return count if frame.f_code.co_filename == "<template>" else None

    import gc

    # a gc callback of the host process (hypothesis registers one) would run under this hook: a
    # budget exceeded there is raised where nothing can catch it, and printed as unraisable
    callbacks, gc.callbacks[:] = gc.callbacks[:], []
    previous = sys.gettrace()
    sys.settrace(in_template)
    try:
        yield
    finally:
        sys.settrace(previous)
        gc.callbacks[:] = callbacks


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
    _check_value("{{ }}", value)  # before it is printed: a short list can print as gigabytes
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
        # not optimized: Jinja's optimizer computes constant parts while compiling, outside the limits
        env = _limited_sandbox(sandbox)(undefined=undefined, autoescape=False, keep_trailing_newline=True,
                                        finalize=_only_values, optimized=False)
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
