"""The layers of docs/architecture.md, held: every import of the package goes down the table (or
stays in its layer), no modules import each other round in a cycle, and every list of the
targets comes from the registry or is checked against it here.

An import is one the code can make: a module-level ``import``/``from``, one inside a function,
or ``importlib.import_module`` of a constant or an f-string (its constant parts, each
``{...}`` standing for one name: ``f"trainspec.targets.{name}.lower"`` reaches every
target's lower.py). Importing ``a.b.c`` runs the packages ``a`` and ``a.b`` first, so those
count too for the layers (a package ``__init__`` must not pull a higher layer in under a
lower one); for cycles only the imports written count.
"""

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from conftest import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
# the one import that is data, not code: the stored structure names the functions it calls, and
# structure.py imports only modules of its own short list (_FUNCTIONS)
DYNAMIC_OK = {"trainspec.schema.structure": {"trainspec.core.fields"}}


# --- the checker -------------------------------------------------------------------------------

def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def written_imports(path: Path, root: Path, known: Set[str]) -> List[Tuple[str, int]]:
    """(module or glob pattern, line) for every import in ``path``: '<dynamic>' for an
    import_module whose name is not a constant or an f-string."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: List[Tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.append((full if full in known else module, node.lineno))
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called != "import_module" or not node.args:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, node.lineno))
            elif isinstance(arg, ast.JoinedStr):
                found.append(("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values),
                              node.lineno))
            else:
                found.append(("<dynamic>", node.lineno))
    return found


def resolve(target: str, known: Set[str]) -> List[str]:
    """The modules of the package an import names (a pattern: every module it matches, one name
    per ``{}``)."""
    if "{}" in target:
        pattern = re.compile("^" + ".".join(re.escape(p) for p in target.split(".")).replace(r"\{\}", r"[^.]+") + "$")
        return sorted(m for m in known if pattern.match(m) and not m.endswith(".__main__"))  # run, never imported
    return [target] if target in known else []


def import_graph(root: Path, top: str) -> Tuple[Dict[str, Dict[str, int]], List[str]]:
    """module -> {imported module of the package: line}, and the problems found reading them."""
    files = sorted((root / top).rglob("*.py"))
    known = {module_name(f, root) for f in files}
    graph: Dict[str, Dict[str, int]] = {}
    problems: List[str] = []
    for path in files:
        name = module_name(path, root)
        graph[name] = {}
        for target, line in written_imports(path, root, known):
            if target == "<dynamic>":
                allowed = DYNAMIC_OK.get(name)
                if allowed is None:
                    problems.append(f"{name}:{line}: import_module of a name no test can read")
                for module in sorted(allowed or ()):
                    graph[name].setdefault(module, line)
                continue
            if not (target == top or target.startswith(top + ".")):
                continue
            modules = resolve(target, known)
            if not modules:
                problems.append(f"{name}:{line}: imports {target}, which is no module of {top}")
            for module in modules:
                if module != name:
                    graph[name].setdefault(module, line)
    return graph, problems


def parents(module: str) -> List[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def folder_of(module: str, root: Path) -> str:
    """The folder a module's file is in, dotted: a package's ``__init__`` is in its own folder."""
    path = root / Path(*module.split("."))
    return module if (path / "__init__.py").exists() else module.rpartition(".")[0]


def layer_of(folder: str, layers: List[List[str]]) -> int:
    """The index of the layer whose folder patterns match ``folder`` (``trainspec.targets.*``: every
    target's folder), or -1."""
    found = -1
    for index, patterns in enumerate(layers):
        if any(fnmatch.fnmatchcase(folder, p) and p.count(".") == folder.count(".") for p in patterns):
            found = index
    return found


def layer_problems(graph: Dict[str, Dict[str, int]], layers: List[List[str]], names: List[str],
                   root: Path) -> List[str]:
    """An import from a folder of a lower layer to one of a higher layer (the packages it runs
    included), a folder in no layer. A package ``__init__`` that imports nothing belongs to none
    and may be anywhere."""
    problems = []
    for module, imports in sorted(graph.items()):
        here = layer_of(folder_of(module, root), layers)
        if here < 0:
            if imports:
                problems.append(f"{module} is in a folder of no layer of the table")
            continue
        reached = dict(imports)
        for target in imports:
            for parent in parents(target):
                reached.setdefault(parent, imports[target])
        for target, line in sorted(reached.items()):
            there = layer_of(folder_of(target, root), layers)
            if there > here:
                problems.append(f"{module}:{line}: imports {target} ({names[there]}), above its layer ({names[here]})")
    return problems


def folder_graph(graph: Dict[str, Dict[str, int]], root: Path) -> Dict[str, Dict[str, str]]:
    """folder -> {folder it imports from: one import that shows it, 'module:line -> module'}."""
    folders: Dict[str, Dict[str, str]] = {}
    for module, imports in sorted(graph.items()):
        here = folder_of(module, root)
        folders.setdefault(here, {})
        for target, line in sorted(imports.items()):
            there = folder_of(target, root)
            if there != here:
                folders[here].setdefault(there, f"{module}:{line} -> {target}")
    return folders


def cycles(graph: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as a sorted list."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def table(text: str) -> Tuple[List[str], List[List[str]]]:
    """The layer table of docs/architecture.md: (names, folder patterns per layer), bottom first."""
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    names, layers = [], []
    for row in re.findall(r"^\|(.+)\|\s*$", section, re.M):
        cells = [c.strip() for c in row.split("|")]
        patterns = re.findall(r"`(trainspec[\w.*]*)`", cells[1]) if len(cells) > 1 else []
        if patterns:
            names.append(cells[0].strip("* "))
            layers.append(patterns)
    return names, layers


# --- the package, held to the table ---------------------------------------------------------------

NAMES, LAYERS = table(ARCHITECTURE.read_text())
GRAPH, READ_PROBLEMS = import_graph(REPO, "trainspec")


def test_the_table_is_read():
    assert len(LAYERS) >= 8 and NAMES[0].startswith("runtime"), (NAMES, LAYERS)


def test_every_import_is_read():
    assert READ_PROBLEMS == []


def test_every_import_goes_down_the_layers():
    assert layer_problems(GRAPH, LAYERS, NAMES, REPO) == []


def test_no_modules_import_each_other_round():
    assert cycles(GRAPH) == []


def test_no_folders_import_each_other_round():
    """Read by folder, every import counted (lazy ones and import_module too), no two folders of
    the package reach each other, directly or through others."""
    folders = folder_graph(GRAPH, REPO)
    assert cycles(folders) == [], {a: b for a, b in folders.items() if b}


def test_every_folder_of_the_package_is_in_one_layer():
    folders = {folder_of(module, REPO) for module in GRAPH}
    placed = {folder: [NAMES[i] for i, patterns in enumerate(LAYERS)
                       if any(fnmatch.fnmatchcase(folder, p) and p.count(".") == folder.count(".") for p in patterns)]
              for folder in folders}
    assert {folder: where for folder, where in placed.items() if len(where) != 1} == {}


def test_the_runtime_imports_nothing_else_of_trainspec():
    """It is shipped next to every job, standard library only."""
    for module, imports in GRAPH.items():
        if module.startswith("trainspec.runtime"):
            assert all(m.startswith("trainspec.runtime") for m in imports), (module, imports)


def test_package_inits_import_no_layer_above_their_modules():
    """Importing trainspec.targets.azureml.settings runs trainspec/targets/__init__.py and
    trainspec/targets/azureml/__init__.py first: they import nothing."""
    for module, imports in GRAPH.items():
        if (REPO / Path(*module.split("."), "__init__.py")).exists() and module not in ("trainspec.runtime", "trainspec.cli", "trainspec.registry"):
            assert imports == {}, (module, imports)


def test_validation_never_loads_lowering():
    """The schema reaches the targets only through the settings the registry plugs in: validate a
    spec in a fresh process and no lower.py, compiler/ or registry/build.py is loaded."""
    code = ("import sys, trainspec.registry\n"
            "from trainspec.schema.compose import compose; from trainspec.schema.validate import validate\n"
            "valid, found = validate(compose(sys.argv[1]))\n"
            "assert valid is not None, found\n"
            "print(sorted(m for m in sys.modules if m.startswith('trainspec')))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "specs" / "ray-lightning.yaml")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = ast.literal_eval(done.stdout.strip())
    assert "trainspec.targets.ray.settings" in loaded, loaded
    assert not [m for m in loaded if m.endswith(".lower") or m.startswith(("trainspec.compiler", "trainspec.registry.build"))]


def test_the_schema_without_the_registry_says_so():
    """The schema never imports a target: a program that uses it without the registry is told to
    import it, never handed a spec model without its targets."""
    done = subprocess.run([sys.executable, "-c", "import trainspec.schema.model"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "import trainspec.registry first" in done.stderr, done.stderr


# --- the checker can fail --------------------------------------------------------------------------

def test_the_checker_sees_a_bad_import_and_a_cycle(tmp_path):
    """A tiny package: core must not import spec (a layer above), and a <-> b is a cycle, one
    of them through import_module of an f-string inside a function."""
    pkg = tmp_path / "fake"
    (pkg / "spec").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "spec" / "__init__.py").write_text("")
    (pkg / "core.py").write_text("def f():\n    from fake.spec import a\n")
    (pkg / "spec" / "a.py").write_text("from . import b\n")
    (pkg / "spec" / "b.py").write_text("import importlib\n\ndef g(n):\n    return importlib.import_module(f'fake.spec.{n}')\n")
    graph, problems = import_graph(tmp_path, "fake")
    assert problems == []
    assert graph["fake.spec.b"] == {"fake.spec.a": 4}  # the pattern matches a (and b itself, not an edge)
    layers = [["fake"], ["fake.spec"]]
    assert layer_problems(graph, layers, ["core", "spec"], tmp_path) == [  # the package it runs, and the module
        "fake.core:2: imports fake.spec (spec), above its layer (core)",
        "fake.core:2: imports fake.spec.a (spec), above its layer (core)"]
    assert cycles(graph) == [["fake.spec.a", "fake.spec.b"]]
    assert cycles(folder_graph(graph, tmp_path)) == []  # fake imports fake.spec, never the other way
    (pkg / "spec" / "c.py").write_text("import importlib\nimportlib.import_module(name)\n")
    assert import_graph(tmp_path, "fake")[1] == ["fake.spec.c:2: import_module of a name no test can read"]


def test_the_checker_sees_folders_that_import_each_other_without_a_module_cycle(tmp_path):
    """x/m imports y/n, y/o imports x/p: no two modules import each other round, the two folders do."""
    pkg = tmp_path / "fake"
    for folder in ("x", "y"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "x" / "m.py").write_text("from fake.y import n\n")
    (pkg / "y" / "n.py").write_text("")
    (pkg / "y" / "o.py").write_text("def f():\n    from fake.x import p\n")
    (pkg / "x" / "p.py").write_text("")
    graph, problems = import_graph(tmp_path, "fake")
    assert problems == [] and cycles(graph) == []
    folders = folder_graph(graph, tmp_path)
    assert cycles(folders) == [["fake.x", "fake.y"]]
    assert folders["fake.y"] == {"fake.x": "fake.y.o:2 -> fake.x.p"}
    assert layer_problems(graph, [["fake.x"], ["fake.y"]], ["low", "high"], tmp_path) == [
        "fake.x.m:1: imports fake.y (high), above its layer (low)", "fake.x.m:1: imports fake.y.n (high), above its layer (low)"]


@pytest.fixture
def old_layout(tmp_path):
    archive = subprocess.run(["git", "archive", "0f84017", "trainspec"], cwd=REPO, capture_output=True)
    if archive.returncode:
        pytest.skip("commit 0f84017 (the layout before the folders) is not in this clone's history")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    return tmp_path


def test_the_checker_names_the_cycle_of_the_old_layout(old_layout):
    graph, _ = import_graph(old_layout, "trainspec")
    found = [group for group in cycles(graph) if "trainspec.schema.model" in group]
    assert found and {"trainspec.compiler", "trainspec.compiler.base", "trainspec.schema.validate",
                      "trainspec.schema.structure"} <= set(found[0]), cycles(graph)


def test_the_folder_check_names_the_folders_of_the_layout_before_the_registry_moved(tmp_path):
    """At 3b0e439 the spec's model imported the registry inside targets/, every target imported
    spec/ and compile/, jobs/ held the scheduler interface and the submit command: one knot of folders."""
    archive = subprocess.run(["git", "archive", "3b0e439", "trainspec"], cwd=REPO, capture_output=True)
    if archive.returncode:
        pytest.skip("commit 3b0e439 (the folders before they were layers) is not in this clone's history")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    graph, _ = import_graph(tmp_path, "trainspec")
    assert cycles(graph) == []  # the modules were already in layers: only the folders were not
    knot = [group for group in cycles(folder_graph(graph, tmp_path)) if "trainspec.spec" in group]
    assert knot and {"trainspec.spec", "trainspec.targets", "trainspec.compile", "trainspec.jobs", "trainspec.review",
                     "trainspec.local"} <= set(knot[0]), knot


# --- every list of the targets ---------------------------------------------------------------------

from trainspec.registry import TARGETS  # noqa: E402


def test_help_names_every_target():
    done = subprocess.run([sys.executable, "-m", "trainspec.cli", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "Azure ML, HPC Pack, Ray, Slurm and Kubernetes" in text, done.stdout
    for display in TARGETS.values():
        assert display in text


def test_the_package_description_names_every_target():
    described = re.search(r'^description = "(.*)"$', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    missing = [display for display in TARGETS.values() if display not in described]
    assert missing == [], f"pyproject.toml's description lacks {missing}"


def test_the_architecture_targets_table_lists_every_target():
    section = ARCHITECTURE.read_text().split("## A target is a folder", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row in re.findall(r"^\|(.+)\|\s*$", section, re.M):
        cells = [c.strip() for c in row.split("|")]
        folder = re.search(r"`targets/(\w+)/`", cells[1]) if len(cells) > 1 else None
        if folder:
            rows[folder.group(1)] = cells[0]
    assert rows == TARGETS, "docs/architecture.md's targets table must have one row per registered target"
    for name in TARGETS:
        assert (REPO / "trainspec" / "targets" / name / "settings.py").exists()
        assert (REPO / "trainspec" / "targets" / name / "lower.py").exists()
