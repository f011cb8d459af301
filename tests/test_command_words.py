"""The words of a command line: trainspec's linear splitter gives exactly what shlex.split gives
(POSIX, no comments), errors included. Its speed is measured in benchmarks/command_size.py."""

import shlex

from hypothesis import given, settings, strategies as st

from trainspec.core.fields import split_command

# the characters shlex treats specially, a few it does not, and non-ASCII blanks it keeps in words
ALPHABET = st.sampled_from(["a", "b", " ", "\t", "\n", "\r", "'", '"', "\\", "#", "$", "\x0b", "\u00a0", "é", "="])


def words(split, text):
    try:
        return split(text)
    except ValueError:
        return ValueError


@settings(max_examples=3000, deadline=None)
@given(text=st.lists(ALPHABET, max_size=16).map("".join))
def test_split_command_is_shlex_split(text):
    assert words(split_command, text) == words(shlex.split, text)


def test_split_command_on_the_cases_that_matter():
    assert split_command("python -c 'print(1)' --x \"a b\" c\\ d ''") == ["python", "-c", "print(1)", "--x", "a b", "c d", ""]
    assert split_command('echo "a\\"b\\\\c\\d"') == ["echo", 'a"b\\c\\d']
    assert split_command("  ") == []
    for bad in ["python 'open", 'python "open', "python \\"]:
        assert words(split_command, bad) is ValueError


def test_a_megabyte_word_splits():
    word = "a'b'\\c" * 200_000  # shlex.split takes tens of seconds on this; the benchmark shows the times
    assert split_command(f"python t.py {word}") == ["python", "t.py", "abc" * 200_000]
