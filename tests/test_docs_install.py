"""How trainspec is installed, said one way everywhere: every `pip install` line of the README and
of the docs site is one of the documented forms (a checkout's `-e`, a git URL at a tag, a built
wheel, PyPI once published) with extras pyproject.toml has, and a wheel built from this checkout
installs with its extras (pip resolves it, `--dry-run`, offline against this environment: asking
the package index took 55-67 s of every run and proved nothing more about the wheel).

Bug: "not on PyPI" was said only in gitops.md, while ray.md said `pip install 'trainspec[ray]'`.
"""

import email.parser
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO, installed_closure

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
GIT_URL = "git+https://github.com/<org>/trainspec@<tag>"  # the placeholder, as the README marks it
ANCHOR = "development.md#install-trainspec-in-your-own-repository"
# what the docs install that is not trainspec: the test set-up's torch, the property tests'
# hypothesis, and the Dockerfile line of an image + pip job (docs/targets/azureml.md)
OTHERS = {"torch==2.13.0", "hypothesis", "--no-cache-dir <packages>"}
PIP = re.compile(r"pip install ([^`\n;&|#]*)")
EXTRAS = re.compile(r"^(?P<name>[^\[\]]+)(?:\[(?P<extras>[a-z0-9_,-]+)\])?$")


def project():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python < 3.11 needs tomli")
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def blocks(text):
    """The text's paragraphs and fenced code blocks, each whole."""
    out, current, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            out.append("\n".join(current))
            current = []
        else:
            current.append(line)
    return out + ["\n".join(current)]


def pip_installs():
    """(page, the block it is in, its arguments) of every `pip install` in the README and docs."""
    for page in PAGES:
        for block in blocks(page.read_text()):
            for match in PIP.finditer(block):
                yield page.relative_to(REPO).as_posix(), block, match.group(1).strip()


def form(args: str, version: str):
    """(form, extras) of one `pip install` line, or None when it is no documented form."""
    if args in OTHERS:
        return "other", set()
    words = shlex.split(args)
    if len(words) == 1 and " @ " in words[0]:  # 'trainspec[x] @ git+...', quoted whole
        words = words[0].split(" ")
    if words[:1] == ["-e"] and len(words) == 2:
        target, kind = words[1], "checkout"
    elif len(words) == 3 and words[1] == "@" and words[2] == GIT_URL:
        target, kind = words[0], "git"
    elif len(words) == 1:
        target, kind = words[0], "wheel" if words[0].startswith("dist/") else "pypi"
    else:
        return None
    found = EXTRAS.match(target)
    if found is None:
        return None
    name = {"checkout": ".", "git": "trainspec", "pypi": "trainspec",
            "wheel": f"dist/trainspec-{version}-py3-none-any.whl"}[kind]
    if found.group("name") != name:
        return None
    return kind, set((found.group("extras") or "").split(",")) - {""}


def test_every_pip_install_in_the_docs_is_a_documented_form():
    meta = project()
    extras = set(meta["optional-dependencies"])
    seen = {}
    for page, block, args in pip_installs():
        found = form(args, meta["version"])
        assert found is not None, f"{page}: `pip install {args}` is none of the install forms (README, {ANCHOR})"
        kind, named = found
        assert named <= extras, f"{page}: `pip install {args}` names extras pyproject.toml lacks: {named - extras}"
        if kind == "pypi":  # until it is published, PyPI is named only where the text says so
            assert "not on PyPI" in block, f"{page}: `pip install {args}` reads as if trainspec were on PyPI"
        seen.setdefault(kind, set()).add(page)
    # the README and the install page each show every form a team's repository can use
    for kind in ("git", "wheel", "pypi"):
        assert {"README.md", "docs/development.md"} <= seen.get(kind, set()), (kind, seen.get(kind))


def test_the_readme_names_every_client_extra_and_the_docs_extra():
    readme = (REPO / "README.md").read_text()
    for extra in ("azureml", "kubernetes", "ray"):
        assert f"`[{extra}]`" in readme, extra
    assert "pip install -e '.[docs]'" in readme and "pip install -e '.[docs]'" in \
        (REPO / "docs" / "development.md").read_text()


def test_every_page_that_names_a_client_extra_links_to_the_install_forms():
    """The target pages, commands.md and gitops.md say `[ray]` where they need it, and where to
    install it from: the install forms, not a PyPI that has no trainspec."""
    for page in PAGES:
        if page.name in ("README.md", "development.md"):
            continue
        text = page.read_text()
        if re.search(r"`\[(azureml|kubernetes|ray)\]`|the `azureml` extra", text):
            assert ANCHOR in text, f"{page.relative_to(REPO)} names an extra but not where to install it from"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of this checkout (a build writes build/ and *.egg-info where it runs)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "trainspec", src / "trainspec", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-q", "-w", str(dist)],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = dist.glob("*.whl")
    return built


def test_the_wheel_is_named_as_the_docs_say_and_carries_its_extras_and_data(wheel):
    meta = project()
    assert wheel.name == f"trainspec-{meta['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zipped:
        names = set(zipped.namelist())
        metadata = zipped.read(f"trainspec-{meta['version']}.dist-info/METADATA").decode()
    provides = set(re.findall(r"^Provides-Extra: (.*)$", metadata, re.M))
    assert {"azureml", "kubernetes", "ray", "docs"} <= provides, provides
    # what an installed trainspec reads from its own package: the structure snapshot, init's files
    assert "trainspec/schema/spec.core.json" in names
    assert any(n.startswith("trainspec/scaffold/files/") for n in names), sorted(names)[:20]


def test_a_built_wheel_installs_with_its_client_extras(wheel):
    """pip resolves the wheel with its client extras offline (`--no-index`), against this
    environment: every requirement, transitively, is met by what the test extra installed; what
    they bring is read from the installed metadata (installed_closure), torch never among it."""
    extras = ["azureml", "kubernetes", "ray"]
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                           "--no-index", "--disable-pip-version-check", f"{wheel}[{','.join(extras)}]"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [item["metadata"]["name"] for item in json.loads(proc.stdout)["install"]] == ["trainspec"]
    with zipfile.ZipFile(wheel) as zipped:
        text = zipped.read(f"trainspec-{project()['version']}.dist-info/METADATA").decode()
    metadata = email.parser.Parser().parsestr(text)
    names = set(installed_closure(metadata.get_all("Requires-Dist"), extras)) | {"trainspec"}
    assert {"trainspec", "azure-ai-ml", "azure-identity", "kubernetes", "ray"} <= names, sorted(names)
    assert "torch" not in names
