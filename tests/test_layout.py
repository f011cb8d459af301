"""The code's shape, held: everything a target means lives in its folder.

A target's name may appear, as a target (a quoted name, ``targets.<name>``, ``-t <name>``),
only in its own files (``targets/<name>/``, ``runtime/<name>_*.py``), the registry
(``targets/__init__.py``) and the shim (its detector). Adding a target therefore costs its
folder, a registry line, a detector and its tests -- and this test fails the day a platform's
knowledge leaks into the shared code again.
"""

import re

import pytest

from conftest import REPO
from trainspec.build import target
from trainspec.compile.base import Target
from trainspec.targets import TARGETS
from trainspec.targets.vocabulary import settings

PACKAGE = REPO / "trainspec"
SHARED_OK = {"targets/__init__.py", "runtime/shim.py"}
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
    return folder == f"targets/{name}" or (folder == "runtime" and file.startswith(f"{name}_"))


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


SETTINGS = ("NAME", "SETTINGS_DESCRIPTION", "SETTINGS_EXAMPLE", "settings_model", "settings_errors",
            "PLATFORM_VARIABLES", "COST_SETTINGS", "SECRET_REFERENCE")
OVERRIDDEN = ("cannot_run", "cannot_express", "lower", "refs_for")  # no default in compile/base.py's Target


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_implements_the_interface_in_the_registry(name):
    vocabulary = settings(name)
    missing = [attr for attr in SETTINGS if not hasattr(vocabulary, attr)]
    assert missing == [], f"{name} lacks {missing} in targets/{name}/settings.py (targets/vocabulary.py lists them)"
    assert vocabulary.NAME == name
    compiled = target(name)
    # no launcher of its own: the spec decides it, the same on every target (ValidSpec.launcher)
    assert isinstance(compiled, Target) and compiled.name == name and not hasattr(compiled, "launchers")
    assert type(compiled).launcher is Target.launcher
    lacking = [attr for attr in OVERRIDDEN if getattr(type(compiled), attr) is getattr(Target, attr)]
    assert lacking == [], f"{name}'s Target does not implement {lacking}"
    plays = (PACKAGE / "targets" / name / "local.py").exists()
    refuses = type(compiled).local_refusal is not Target.local_refusal
    assert not (plays and refuses), \
        "run --local either plays the job (targets/<name>/local.py) or refuses in one line (local_refusal)"
    documented = (PACKAGE / "compile" / "base.py").read_text()
    for attr in (*OVERRIDDEN, "plan_port", "plan_settings", "plan_image", "local_settings", "local_refusal", "name"):
        assert f"``{attr}" in documented, f"{attr} is not documented in compile/base.py's Target"


def test_targets_never_import_each_other():
    for name in TARGETS:
        for source in sorted((PACKAGE / "targets" / name).glob("*.py")):
            text = source.read_text()
            for other in set(TARGETS) - {name}:
                assert not re.search(rf"^\s*(from \S*\b{other}\b|import \S*\b{other}\b)", text, re.M), \
                    (source.name, name, other)
