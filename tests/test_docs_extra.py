"""The docs extra: `pip install -e '.[docs]' && mkdocs serve` builds the site, with nothing of the
platforms' SDKs or of torch (a newcomer waited 282 s for a 1.7 GB virtualenv to build the docs).

What the extra installs is read offline from this environment's metadata (every requirement,
transitively, met by the installed versions; pip's `--dry-run` against the package index took
25-40 s and proved nothing more), and `mkdocs build --strict` runs in this environment with every
distribution the docs extra does not install hidden from its imports. No fresh
virtualenv per run (docs/development.md has the figures of one, measured by hand).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, installed_closure

# what the docs extra must never bring: the job platforms' SDKs, torch and its trainers
HEAVY = {"torch", "ray", "azure-ai-ml", "azure-identity", "kubernetes", "lightning", "accelerate"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python < 3.11 needs tomli")
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def extras():
    return project()["optional-dependencies"]


@pytest.fixture(scope="module")
def docs_report():
    """What `.[docs]` installs from nothing: {canonical name: version}, trainspec's own requirements
    and the docs extra's followed through this environment's metadata (offline, installed_closure)."""
    meta = project()
    return {"trainspec": meta["version"], **installed_closure(meta["dependencies"] + extras()["docs"])}


def test_the_docs_extra_resolves_without_torch_ray_or_azure(docs_report):
    assert {"mkdocs", "mkdocs-material", "pymdown-extensions", "trainspec"} <= set(docs_report), docs_report
    assert not HEAVY & set(docs_report), sorted(HEAVY & set(docs_report))


# mkdocs build --strict in this interpreter, as if only the docs extra were installed: a module of
# any other distribution (this environment has the test extra's) cannot be imported, so an optional
# import falls back as it would there. Prints the distributions the build used, as JSON.
_BUILD_WITH_ONLY = """\
import json, re, sys
from importlib.metadata import packages_distributions
allowed = set(json.loads(sys.argv[3]))
owners = packages_distributions()
before = set(sys.modules)

def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()

class OnlyTheDocsExtra:
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.partition(".")[0])
        if dists and not any(canonical(d) in allowed for d in dists):
            raise ModuleNotFoundError(f"No module named {name!r} (not in the docs extra)", name=name)
        return None

sys.meta_path.insert(0, OnlyTheDocsExtra())
from mkdocs.__main__ import cli
try:
    cli(["build", "--strict", "-f", sys.argv[1], "-d", sys.argv[2]], standalone_mode=False)
except SystemExit as exc:
    if exc.code:
        raise
imported = {name.partition(".")[0] for name in set(sys.modules) - before}
print(json.dumps(sorted({canonical(d) for name in imported for d in owners.get(name, [])})))
"""


def test_the_site_builds_strictly_with_only_what_the_docs_extra_installs(docs_report, tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-c", _BUILD_WITH_ONLY, str(REPO / "mkdocs.yml"), str(tmp_path / "site"),
                           json.dumps(sorted(docs_report))], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
    used = set(json.loads(proc.stdout.splitlines()[-1]))
    assert {"mkdocs", "mkdocs-material", "pymdown-extensions"} <= used, used  # the theme, the pymdownx.* extensions
    assert used <= set(docs_report), used - set(docs_report)


def test_the_test_extra_has_what_the_docs_extra_has():
    """tests/test_docs.py builds the site from the test extra: the same two requirements."""
    found = extras()
    assert set(found["docs"]) <= set(found["test"]), set(found["docs"]) - set(found["test"])
