"""The code's shape, held: everything a target means lives in its folder.

A target's name may appear, as a target (a quoted name, ``targets.<name>``, ``-t <name>``),
only in its own files (``targets/<name>/``, ``runtime/<name>_*.py``), the registry
(``registry/__init__.py``) and the shim (its detector). Adding a target therefore costs its
folder, a registry line, a detector and its tests -- and this test fails the day a platform's
knowledge leaks into the shared code again.
"""

import difflib
import importlib
import re
import types

import pytest

from conftest import REPO
from trainspec.registry.build import target
from trainspec.compiler.base import Target
from trainspec.registry import TARGETS
from trainspec.schema.vocabulary import settings

PACKAGE = REPO / "trainspec"
SHARED_OK = {"registry/__init__.py", "runtime/shim.py"}
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
MEMBERS = (*Target.REQUIRED, *Target.OPTIONAL)  # what a lower.py declares (compiler/base.py's table)
OWN = ("launcher",)  # the Target's, never a module's: the spec decides who starts the processes


def look_alikes(module) -> list:
    """The module-level names of a lower.py that look like a member of the interface but are not
    one (a misspelling, the wrong case, or the Target's own ``launcher``), each with the member it
    resembles: the wrapper would silently keep the default in its place. Functions and classes
    imported from elsewhere are not the module's own declarations."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in MEMBERS:
            continue
        if getattr(value, "__module__", module.__name__) != module.__name__ and not isinstance(value, str):
            continue
        folded = {member.lower(): member for member in (*MEMBERS, *OWN)}
        close = difflib.get_close_matches(name.lower(), folded, n=1, cutoff=0.8)
        if close:
            found.append((name, folded[close[0]]))
    return found


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_declares_the_interface_once_in_its_modules(name):
    vocabulary = settings(name)
    missing = [attr for attr in SETTINGS if not hasattr(vocabulary, attr)]
    assert missing == [], f"{name} lacks {missing} in targets/{name}/settings.py (schema/vocabulary.py lists them)"
    assert vocabulary.NAME == name
    module = importlib.import_module(f"trainspec.targets.{name}.lower")
    missing = [member for member in Target.REQUIRED if not hasattr(module, member)]
    assert missing == [], f"targets/{name}/lower.py does not define {missing} (compiler/base.py, Target)"
    assert look_alikes(module) == [], f"targets/{name}/lower.py: names that look like the interface's but are not"
    # no class re-lists the module: the module is the declaration, the pipeline wraps it
    assert not [value for value in vars(module).values()
                if isinstance(value, type) and issubclass(value, Target) or isinstance(value, Target)]
    compiled = target(name)
    assert isinstance(compiled, Target) and compiled.module is module and compiled.NAME == name
    assert all(getattr(compiled, member) is getattr(module, member) for member in MEMBERS if hasattr(module, member))
    plays = (PACKAGE / "targets" / name / "local.py").exists()
    assert not (plays and hasattr(module, "LOCAL_REFUSAL")), \
        "run --local either plays the job (targets/<name>/local.py) or refuses in one line (LOCAL_REFUSAL)"


def test_the_interface_is_documented_once_with_a_default_for_every_optional_member():
    documented = Target.__doc__
    for member in (*MEMBERS, *OWN):
        assert f"``{member}" in documented, f"{member} is not documented in compiler/base.py's Target"
    defaults = [member for member in Target.OPTIONAL if member != "LOCAL_REFUSAL" and not hasattr(Target, member)]
    assert defaults == [] and not [member for member in Target.REQUIRED if hasattr(Target, member)]


def test_a_module_that_lacks_or_misspells_a_member_is_caught():
    """The checks themselves can fail: a module without refs_for cannot be wrapped, and one that
    misspells an optional member (which would silently keep the default) is seen."""
    module = types.ModuleType("trainspec.targets.fake.lower")
    module.NAME, module.CANNOT_RUN = "slurm", {}
    for member in ("cannot_express", "lower", "plan_facts", "cost_basis"):
        setattr(module, member, lambda valid: None)
    with pytest.raises(TypeError, match=r"trainspec\.targets\.fake\.lower does not define refs_for"):
        Target(module)
    module.refs_for = lambda valid: None
    assert Target(module).plan_settings(None) == {} and "Slurm" in Target(module).LOCAL_REFUSAL

    def plan_setting(valid):
        return {"shown": "never"}

    plan_setting.__module__ = module.__name__
    module.plan_setting, module.stages_code, module.launcher = plan_setting, "code", plan_setting
    assert look_alikes(module) == [("plan_setting", "plan_settings"), ("stages_code", "STAGES_CODE"),
                                   ("launcher", "launcher")]


def test_targets_never_import_each_other():
    for name in TARGETS:
        for source in sorted((PACKAGE / "targets" / name).glob("*.py")):
            text = source.read_text()
            for other in set(TARGETS) - {name}:
                assert not re.search(rf"^\s*(from \S*\b{other}\b|import \S*\b{other}\b)", text, re.M), \
                    (source.name, name, other)
