"""The docs site stays true: it builds strictly (no broken link or anchor, no page outside the nav),
its field tables are what the spec's JSON Schema says, every place that lists the targets names every
registered one, and the specs it shows validate."""

import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, ts

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

# Lists of targets that are meant to leave some out. A page about one target may list the others
# (SUBJECT); run --local lists the targets it plays (see the test); and history stays as measured.
SUBJECT = {"import.md": {"azureml"}}  # `trainspec import` reads Azure ML jobs
HISTORY = {("speed.md", "Azure ML, HPC Pack, Ray"): "the targets of 2026-11, when the benchmark was measured"}

# How the docs name each target in prose. A new target gets its name here, its page
# docs/targets/<name>.md in mkdocs.yml's nav, and its row in the README's targets table.
DISPLAY = {"azureml": "Azure ML", "hpcpack": "HPC Pack", "ray": "Ray", "slurm": "Slurm", "kubernetes": "Kubernetes"}


def registered_targets():
    """{name: why run --local refuses it, or None} of every registered target (the one place this
    file reads the registry)."""
    from trainspec.commands.run import refusal_of as refusal
    from trainspec.registry import TARGETS

    return {name: refusal(name) for name in TARGETS}


def mkdocs(config: Path, site: Path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, env=env)


def nav_pages(config: Path):
    """The page files mkdocs.yml's nav names (mkdocs.yml is plain YAML: no tags in it)."""
    from ruamel.yaml import YAML

    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    return list(walk(YAML(typ="safe").load(config.read_text())["nav"]))


def test_the_site_builds_strictly_with_every_page_in_the_nav(tmp_path):
    proc = mkdocs(REPO / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    assert sorted(nav_pages(REPO / "mkdocs.yml")) == sorted(str(p.relative_to(DOCS)) for p in PAGES)
    # a reader sees every page in the built site's navigation, here from a target's page
    html = (tmp_path / "site" / "targets" / "slurm" / "index.html").read_text()
    links = {posixpath.normpath(posixpath.join("/targets/slurm/", href))
             for href in re.findall(r'href="([^"#]*)" class="md-nav__link', html)}
    urls = {posixpath.normpath("/" + str(page.relative_to(DOCS).with_suffix("")).replace("index", "")) for page in PAGES}
    assert links == urls


@pytest.mark.parametrize("breakage", ["broken link", "broken anchor", "page outside the nav"])
def test_a_strict_build_fails_on(tmp_path, breakage):
    """The check above is real: the same site with one mistake does not build."""
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "commands.md"
    if breakage == "broken link":
        page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md).\n")
        expected = "no-such-page.md"
    elif breakage == "broken anchor":
        page.write_text(page.read_text() + "\nSee [defaults](spec.md#no-such-section).\n")
        expected = "#no-such-section"
    else:
        (copy / "docs" / "notes.md").write_text("# Notes\n")
        expected = "notes.md"
    proc = mkdocs(copy / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert expected in proc.stderr and "strict" in proc.stderr, proc.stderr


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_field_tables_are_generated_from_the_schema():
    gen = load_generator()
    schema = json.loads((REPO / "schema" / "trainspec.schema.json").read_text())
    page = (DOCS / "reference.md").read_text()
    assert gen.render(page, schema) == page, "docs/reference.md is stale: run python docs/gen_reference.py"
    check = subprocess.run([sys.executable, str(DOCS / "gen_reference.py"), "--check"], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    # every field of every object is a row
    for node in [schema, *schema["$defs"].values()]:
        for name, prop in node.get("properties", {}).items():
            assert re.search(rf"^\| `{name}` \|.*\| {re.escape(gen.prose(prop.get('description', '')))}", page, re.M), name


def test_a_changed_schema_makes_the_tables_stale():
    gen = load_generator()
    schema = json.loads((REPO / "schema" / "trainspec.schema.json").read_text())
    page = (DOCS / "reference.md").read_text()
    schema["$defs"]["Resources"]["properties"]["nodes"]["maximum"] = 4096
    schema["$defs"]["SlurmTarget"]["properties"]["reservation"] = {"type": "string", "description": "A reservation."}
    fresh = gen.render(page, schema)
    assert fresh != page
    assert "| `nodes` | integer (1 to 4096) |" in fresh and "| `reservation` | text |  | A reservation. |" in fresh
    assert fresh.startswith(page[:page.index(gen.BEGIN)])  # the prose around the tables is kept


def target_runs(text: str):
    """Every place a text enumerates targets: three or more target names (as prose names them, or as
    `-t` words) joined only by commas, "and", "or", "|" or "/". Markdown links count as their text."""
    names = sorted({*DISPLAY.values(), *DISPLAY}, key=len, reverse=True)
    name = "(?:" + "|".join(re.escape(n) for n in names) + ")"
    sep = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*\|\s*|\s*/\s*)"
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [Azure ML](targets/azureml.md) -> Azure ML
    text = re.sub(r"\s+", " ", text)
    for match in re.finditer(rf"(?<![\w-]){name}(?:{sep}{name})+(?![\w-])", text):
        found = set(re.findall(rf"(?<![\w-]){name}(?![\w-])", match.group(0)))
        if len(found) >= 3:
            yield match.group(0), {key for key, shown in DISPLAY.items() if key in found or shown in found}


def test_every_list_of_targets_names_every_target():
    registered = registered_targets()
    missing = set(registered) - set(DISPLAY)
    assert not missing, f"add the prose name of {sorted(missing)} to DISPLAY"
    # run --local plays every target but those that refuse it (LOCAL_REFUSAL: a Ray job needs a Ray cluster)
    local = {name for name, refused in registered.items() if refused is None}
    lists = 0
    for page in [REPO / "README.md", *PAGES]:
        for run, named in target_runs(page.read_text()):
            lists += 1
            if (page.name, run) in HISTORY:
                continue
            subject = {page.stem} if page.parent.name == "targets" else SUBJECT.get(page.name, set())
            expected = local if page.name == "local.md" and "|" in run else set(registered) - subject
            assert named >= expected, f"{page.relative_to(REPO)}: {run!r} leaves out {sorted(expected - named)}"
    assert lists >= 5  # the lists are found at all (commands, index, runtime...)


def test_every_target_has_its_page_and_its_row_in_the_readme():
    nav = nav_pages(REPO / "mkdocs.yml")
    readme = (REPO / "README.md").read_text()
    table = re.search(r"^## Targets\n(.*?)(?=^## )", readme, re.S | re.M).group(1)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    assert len(rows) == len(registered_targets())
    for name in registered_targets():
        assert (DOCS / "targets" / f"{name}.md").is_file() and f"targets/{name}.md" in nav, name
        assert any(f"| `{name}` |" in row and f"(docs/targets/{name}.md)" in row for row in rows), name


GLANCE = ("Where the command starts", "What is copied, and when", "What is installed", "Which launcher runs")


def test_every_target_page_says_at_a_glance_where_the_command_starts_what_is_copied_installed_and_launched():
    """Issue 41: per target, the four things that make the job that runs the job written, in one
    table a reader finds in the same place on every page (read as rendered: a markdown table)."""
    from markdown_it import MarkdownIt

    for name in registered_targets():
        text = (DOCS / "targets" / f"{name}.md").read_text()
        section = re.search(r"^## At a glance\n(.*?)(?=^## )", text, re.S | re.M)
        assert section, f"docs/targets/{name}.md has no '## At a glance' section"
        tokens = MarkdownIt("commonmark").enable("table").parse(section.group(1))
        cells = [t.content for t in tokens if t.type == "inline"]
        rows = {cells[i]: cells[i + 1] for i in range(0, len(cells) - 1) if cells[i] in GLANCE}
        assert set(rows) == set(GLANCE), (name, sorted(set(GLANCE) - set(rows)))
        assert all(len(value) > 40 for value in rows.values()), (name, rows)


def spec_examples():
    """Every whole spec (a ```yaml block starting `version: 1`) in the README and the docs."""
    for page in [REPO / "README.md", *PAGES]:
        for block in re.findall(r"^```yaml\n(version: 1\n.*?)^```", page.read_text(), re.S | re.M):
            yield pytest.param(block, id=str(page.relative_to(REPO)))


@pytest.mark.parametrize("text", list(spec_examples()))
def test_the_specs_the_docs_show_validate(tmp_path, text):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "shown.yaml").write_text(text)
    proc = ts("validate", "--strict", "specs/shown.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_readme_links_to_pages_that_exist():
    """The README is read on the forge, outside the site: its links are paths in the repository."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    assert [link for link in local if not (REPO / link).exists()] == []
