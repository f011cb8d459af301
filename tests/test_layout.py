"""The code's shape, held: everything a target means lives in its module.

A target's name may appear, as a target (a quoted name, ``targets.<name>``, ``-t <name>``),
only in its own files (``compiler/<name>.py``, ``compiler/<name>_*.py``, ``runtime/<name>_*.py``),
the registry (``compiler/__init__.py``) and the shim (its detector). Adding a target therefore
costs its module, a registry line, a detector and its tests -- and this test fails the day a
platform's knowledge leaks into the shared code again.
"""

import re

import pytest

from conftest import REPO
from trainspec.compiler import TARGETS, target

PACKAGE = REPO / "trainspec"
SHARED_OK = {"compiler/__init__.py", "runtime/shim.py"}
# spec vocabulary that happens to share a target's name: the field environment.azureml (a
# registered Azure ML environment) is the spec's, not the target's
VOCABULARY = re.compile(r'\(\s*"environment",\s*"azureml"\s*\)|^ENVIRONMENT_SOURCES = .*$', re.M)


def mentions(name: str, text: str) -> int:
    text = VOCABULARY.sub("", text)
    return len(re.findall(rf"""(["']){name}\1|\btargets\.{name}\b|-t {name}\b""", text))


def files_naming(name: str):
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if mentions(name, path.read_text()))


def own(name: str, relative: str) -> bool:
    folder, _, file = relative.rpartition("/")
    return folder in ("compiler", "runtime") and (file == f"{name}.py" or file.startswith(f"{name}_"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_target_is_named_only_by_its_module_the_registry_and_the_shim(name):
    outside = [f for f in files_naming(name) if not own(name, f) and f not in SHARED_OK]
    assert outside == [], f"{name} is named outside its module: {outside}"


def test_the_rule_sees_a_leak():
    """The check itself can fail: each form of a mention counts, the spec's own field does not."""
    assert mentions("hpcpack", 'if target == "hpcpack":') == 1
    assert mentions("ray", "settings = spec.targets.ray") == 1
    assert mentions("azureml", "trainspec compile x.yaml -t azureml") == 1
    assert mentions("azureml", 'error(("environment", "azureml"), "set either")') == 0
    assert mentions("ray", "import ray") == 0  # the library, not the target


REQUIRED = ("NAME", "LAUNCHERS", "SETTINGS_DESCRIPTION", "SETTINGS_EXAMPLE", "settings_model", "settings_errors",
            "CANNOT_RUN", "cannot_express", "lower", "refs_for", "plan_port", "plan_settings", "local_settings")


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_implements_the_interface_in_the_registry(name):
    module = target(name)
    missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
    assert missing == [], f"{name} lacks {missing} (compiler/__init__.py lists the interface)"
    assert module.NAME == name
    assert hasattr(module, "play_local") != hasattr(module, "LOCAL_REFUSAL"), \
        "run --local either plays the job (play_local) or refuses in one line (LOCAL_REFUSAL)"
    documented = (PACKAGE / "compiler" / "__init__.py").read_text()
    for attr in (*REQUIRED, "play_local", "LOCAL_REFUSAL"):
        assert f"``{attr}" in documented, f"{attr} is not documented in the registry"


def test_targets_never_import_each_other():
    for name in TARGETS:
        source = (PACKAGE / "compiler" / f"{name}.py").read_text()
        for other in set(TARGETS) - {name}:
            assert not re.search(rf"^\s*(from \S*\b{other}\b|import \S*\b{other}\b)", source, re.M), (name, other)
