"""core/patterns.Lazy: a regular expression compiled at its first use answers as the compiled one."""

import re

from trainspec.core.patterns import Lazy


def test_a_lazy_pattern_compiles_at_first_use_once_and_answers_as_the_compiled_one(monkeypatch):
    compiled = []
    real = re.compile
    monkeypatch.setattr(re, "compile", lambda text, flags=0: (compiled.append(text), real(text, flags))[1])
    lazy = Lazy(r"^(\d+)h(?:(\d+)m)?$", re.I)
    assert compiled == []  # made, not compiled
    plain = real(r"^(\d+)h(?:(\d+)m)?$", re.I)
    for text in ("2h", "2H30M", "h", "", "12h5m ", "3h30m"):
        assert bool(lazy.match(text)) == bool(plain.match(text))
        got, expected = lazy.fullmatch(text), plain.fullmatch(text)
        assert (got and got.groups()) == (expected and expected.groups())
    assert lazy.sub(r"<\1>", "4h") == plain.sub(r"<\1>", "4h") == "<4>"
    assert [m.group(0) for m in lazy.finditer("1h")] == ["1h"]
    assert lazy.pattern == plain.pattern and lazy.flags == plain.flags
    assert compiled == [r"^(\d+)h(?:(\d+)m)?$"]  # once, whatever was asked after
