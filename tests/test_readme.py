"""The README's two set-up commands stay true: CI runs the test one verbatim."""

import re

from conftest import REPO


def readme_commands():
    text = (REPO / "README.md").read_text()
    return re.findall(r"```sh\n(python3 -m venv[^\n]*)\n```", text)


def test_readme_has_the_two_commands():
    main, tests = readme_commands()[:2]
    assert main.endswith("trainspec compile specs/ -o build/")
    assert tests.endswith("pytest")


def test_ci_runs_the_readme_test_command():
    tests = readme_commands()[1]
    lines = [l for l in (REPO / ".ci" / "run").read_text().splitlines() if l and not l.startswith("#")]
    assert tests in lines
