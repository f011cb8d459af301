import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"


@pytest.fixture
def repo() -> Path:
    return REPO


def trainspec_cmd():
    """The console script of the interpreter running the tests (works without an activated venv)."""
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


@pytest.fixture
def cli_env():
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env
