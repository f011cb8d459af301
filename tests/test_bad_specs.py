"""The corpus of bad specs: each file under tests/bad_specs/ states, in `# expect:` lines,
the exact line:col, severity and message (prefix) that `trainspec validate` must print."""

import re
import subprocess
from pathlib import Path

import pytest

from conftest import trainspec_cmd

CORPUS = sorted((Path(__file__).parent / "bad_specs").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (error|warning) (\d+):(\d+) (.*)$")


def expectations(path: Path):
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = EXPECT.match(line)
        if m:
            out.append(m.groups())
    assert out, f"{path.name} has no '# expect:' line"
    return out


@pytest.mark.parametrize("spec", CORPUS, ids=lambda p: p.stem)
def test_bad_spec_reports_position_and_message(spec, cli_env):
    proc = subprocess.run([*trainspec_cmd(), "validate", spec.name], cwd=spec.parent, env=cli_env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    for severity, line, col, message in expectations(spec):
        prefix = f"{spec.name}:{line}:{col}: {severity}: {message}"
        assert any(l.startswith(prefix) for l in lines), f"expected a line starting with\n  {prefix}\ngot\n" + proc.stderr
    has_error = any(s == "error" for s, *_ in expectations(spec))
    assert proc.returncode == (1 if has_error else 0), proc.stderr
    if not has_error:
        strict = subprocess.run([*trainspec_cmd(), "validate", "--strict", spec.name], cwd=spec.parent,
                                env=cli_env, capture_output=True, text=True, timeout=300)
        assert strict.returncode == 1
