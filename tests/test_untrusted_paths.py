"""Issue 27, links and paths: a pull request is untrusted input. Nothing outside the repository
is read (a link in a code folder, a path that leads out), nothing outside -o is written or
deleted, and no link is followed there; the runner's environment and .git/config never reach an
output, a comment or a log.

Each test builds a little git repository in tmp_path with real `git`, plays the attack as a pull
request would (links committed or left in the working tree), and runs the command line."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO, git, ts

SECRET = "hunter2"
HEADER = "extraheader"  # what actions/checkout keeps in .git/config


def secret_env() -> Dict[str, str]:
    """The test's environment (its own check cache: conftest) with the secret a runner would hold."""
    return {**os.environ, "SECRET_TOKEN": SECRET}


def leaked(text: str) -> bool:
    return SECRET in text or HEADER in text


def files_leak(folder: Path) -> List[str]:
    """Files under ``folder`` that hold a secret, as text or base64 (a ConfigMap's binaryData)."""
    found = []
    for path in folder.rglob("*") if folder.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        decoded = b"".join(base64.b64decode(m + b"=" * (-len(m) % 4), validate=False)
                           for m in re.findall(rb"[A-Za-z0-9+/]{16,}={0,2}", data) if len(m) % 4 != 1)
        if any(s.encode() in data or s.encode() in decoded for s in (SECRET, HEADER)):
            found.append(str(path))
    return found


def snapshot(root: Path) -> Dict[str, str]:
    """Every entry under ``root`` (links by what they say, files by their bytes), never followed."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + names:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            out[rel] = ("-> " + os.readlink(path)) if path.is_symlink() else \
                (path.read_bytes().hex() if path.is_file() else "dir")
    return out


def k8s_repo(tmp_path: Path) -> Path:
    """A repository with the Kubernetes example (its code folder copied in) compiled to build/
    and committed, and an `extraheader` in .git/config as actions/checkout leaves it."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    shutil.copytree(REPO / "examples" / "ddp", root / "code", ignore=shutil.ignore_patterns("__pycache__"))
    text = (REPO / "specs" / "k8s-ddp.yaml").read_text().replace("code: ../examples/ddp", "code: ../code")
    (root / "specs" / "k8s.yaml").write_text(text)
    git("init", "-q", "-b", "main", cwd=root)
    with open(root / ".git" / "config", "a") as fh:
        fh.write('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3M=\n')
    ts("compile", "specs/", "-o", "build", cwd=root, check=True)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs and outputs", cwd=root)
    return root


def clean(proc) -> None:
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    assert not leaked(proc.stdout) and not leaked(proc.stderr), (proc.stdout[-3000:], proc.stderr[-3000:])


# --- code folders: the attack, end to end ----------------------------------------------------

@pytest.mark.parametrize("committed", [False, True])
def test_links_in_a_code_folder_never_reach_outputs_comments_or_logs(tmp_path, committed):
    """`code/env.txt -> /proc/self/environ` and `code/x -> ../.git/config`: compile, validate, plan,
    diff --git (markdown, what the example workflow posts) and check, with SECRET_TOKEN in their
    environment, print neither the environment nor the extraheader, write nothing, and say where
    the problem is: an error at `code:` naming each link."""
    root = k8s_repo(tmp_path)
    os.symlink("/proc/self/environ", root / "code" / "env.txt")
    os.symlink("../.git/config", root / "code" / "x")
    if committed:
        git("add", "-A", cwd=root)
        git("commit", "-q", "-m", "the pull request", cwd=root)
    before = snapshot(root)
    runs = {" ".join(c): ts(*c, cwd=root, env=secret_env()) for c in (
        ["validate", "specs/"], ["compile", "specs/", "-o", "build"], ["plan", "specs/"],
        ["plan", "--git", "HEAD~1" if committed else "HEAD", "--format", "markdown"],
        ["diff", "--git", "HEAD~1" if committed else "HEAD", "--format", "markdown"],
        ["check", "specs/", "-o", "build"])}
    for command, proc in runs.items():
        clean(proc)
    assert snapshot(root) == before
    assert files_leak(root / "build") == []
    for command in ("validate specs/", "compile specs/ -o build"):
        proc = runs[command]
        assert proc.returncode == 1, proc.stderr
        for link, target in (("env.txt", "/proc/self/environ"), ("x", "../.git/config")):
            assert re.search(rf"^specs/k8s\.yaml:8:7: error: code: \.\./code/{re.escape(link)} is a symbolic link "
                             rf"\(to {re.escape(target)}\).*\(hint: ", proc.stderr, re.M), proc.stderr


def test_a_code_folder_link_that_stays_inside_it_is_refused_too(tmp_path):
    """Any link, even one that stays in the folder: the platform's upload follows it, and trainspec
    reads what it uploads from regular files only."""
    root = k8s_repo(tmp_path)
    os.symlink("train.py", root / "code" / "again.py")
    proc = ts("validate", "specs/k8s.yaml", cwd=root)
    assert proc.returncode == 1
    assert "specs/k8s.yaml:8:7: error: code: ../code/again.py is a symbolic link (to train.py)" in proc.stderr


@pytest.mark.parametrize("field,value,fragment", [
    ("code", "/etc/ssl", "code: '/etc/ssl' is an absolute path"),
    ("code", "../../..", "above the repository root"),
    ("code", "ssl", "code: 'ssl' leads through a symbolic link to"),
    ("code", "../.git", "code: '../.git' leads to"),
    ("environment.conda_file", "../.git/config", "environment.conda_file: '../.git/config' leads to"),
    ("environment.conda_file", "../../outside.yml", "environment.conda_file: '../../outside.yml' leads to"),
    ("environment.conda_file", "env.yml", "environment.conda_file: 'env.yml' leads through a symbolic link to"),
    ("inputs.data.path", "../../outside.yml", "inputs.data.path: '../../outside.yml' leads to"),
    ("extends", "../../outside.yml", "extends: '../../outside.yml' leads to"),
    ("extends", "/etc/hostname", "extends: '/etc/hostname' is an absolute path"),
])
def test_a_path_a_spec_names_stays_inside_the_repository(tmp_path, field, value, fragment):
    """`code`, `environment.conda_file`, `extends` and local inputs resolve inside the repository
    (through `..`, an absolute path or a link that leads out, they are an error at that field);
    an absolute input path names the cluster's storage and stays allowed, never read."""
    root = k8s_repo(tmp_path)
    (tmp_path / "outside.yml").write_text("dependencies: [python]\nSECRET: hunter2\n")
    os.symlink("/etc/ssl", root / "specs" / "ssl")
    os.symlink(str(tmp_path / "outside.yml"), root / "specs" / "env.yml")
    spec = root / "specs" / "k8s.yaml"
    text = spec.read_text()
    if field == "code":
        text = text.replace("code: ../code", f"code: {value}")
    elif field == "extends":
        text = f"extends: {value}\n" + text
    elif field == "inputs.data.path":
        text = text.replace("{path: /shared/datasets/ddp-demo}", f"{{path: {value}}}")
    else:
        text = text.replace("  image: pytorch", f"  conda_file: {value}\n  image: pytorch")
    spec.write_text(text)
    proc = ts("validate", "specs/k8s.yaml", cwd=root, env=secret_env())
    clean(proc)
    assert proc.returncode == 1
    line = next(d for d in proc.stderr.splitlines() if fragment in d)
    assert re.match(r"specs/k8s\.yaml:\d+:\d+: error: ", line), line


@pytest.mark.parametrize("target", ["../.git/config", "OUTSIDE"])
def test_a_spec_file_that_is_a_link_out_of_the_repository_is_never_read(tmp_path, target):
    root = k8s_repo(tmp_path)
    outside = tmp_path / "outside.yaml"
    outside.write_text("version: 1\nname: SECRET_TOKEN=hunter2\ncode: .\ncommand: python x.py\n")
    os.symlink(str(outside) if target == "OUTSIDE" else target, root / "specs" / "evil.yaml")
    for command in (["validate", "specs/"], ["plan", "specs/"], ["compile", "specs/", "-o", "build"]):
        proc = ts(*command, cwd=root, env=secret_env())
        clean(proc)
        assert proc.returncode == 1, (command, proc.stderr)
        assert re.search(r"^specs/evil\.yaml:1:1: error: is a symbolic link to .*, (outside the repository \S+|"
                         r"inside \S+/\.git): never read", proc.stderr, re.M), proc.stderr


@pytest.mark.parametrize("target", [".git/config", "OUTSIDE"])
def test_a_team_catalog_that_is_a_link_out_of_the_repository_is_never_read(tmp_path, target):
    """Bug: `trainspec-skus.yaml -> <a file outside>` was read and its keys printed in errors."""
    root = k8s_repo(tmp_path)
    outside = tmp_path / "outside.yaml"
    outside.write_text("skus:\n  hunter2: {gpus: x}\n")
    with open(root / ".git" / "config", "a") as fh:
        fh.write("extraheader: {gpus: x}\n")
    os.symlink(str(outside) if target == "OUTSIDE" else target, root / "trainspec-skus.yaml")
    proc = ts("validate", "specs/", cwd=root, env=secret_env())
    clean(proc)
    assert proc.returncode == 1
    assert re.search(r"^trainspec-skus\.yaml:1:1: error: is a symbolic link to \S+, (outside the repository \S+|"
                     r"inside \S+/\.git): never read", proc.stderr, re.M), proc.stderr


def test_an_absolute_input_path_is_the_clusters_and_is_never_read(tmp_path):
    root = k8s_repo(tmp_path)
    spec = root / "specs" / "k8s.yaml"
    spec.write_text(spec.read_text().replace("{path: /shared/datasets/ddp-demo}", "{path: /proc/self}"))
    proc = ts("compile", "specs/", "-o", "build", cwd=root, env=secret_env())
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    assert files_leak(root / "build") == []


def test_a_build_context_with_a_link_is_an_error_at_its_path(tmp_path):
    root = k8s_repo(tmp_path)
    (root / "docker").mkdir()
    (root / "docker" / "Dockerfile").write_text("FROM python:3.12\n")
    os.symlink("../.git/config", root / "docker" / "config")
    spec = root / "specs" / "k8s.yaml"
    spec.write_text(spec.read_text().replace("  image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                                             "  build: {path: ../docker}"))
    proc = ts("validate", "specs/k8s.yaml", cwd=root, env=secret_env())
    clean(proc)
    assert re.search(r"^specs/k8s\.yaml:\d+:\d+: error: environment\.build\.path: \.\./docker/config is a symbolic "
                     r"link \(to \.\./\.git/config\)", proc.stderr, re.M), proc.stderr


# --- the output folder: nothing outside -o is written or deleted, no link followed ------------------

def elsewhere_with_an_orphan(tmp_path: Path, root: Path) -> Path:
    """<tmp>/elsewhere holding what prune would delete in build/: a target folder with a trainspec
    header (of a spec that does not exist) and a file without one, and a file of its own."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kubernetes").mkdir(parents=True)
    job = (root / "build" / "k8s-ddp" / "kubernetes" / "job.yaml").read_text()
    (elsewhere / "kubernetes" / "job.yaml").write_text(job.replace("specs/k8s.yaml", "specs/gone.yaml"))
    (elsewhere / "kubernetes" / "notes.txt").write_text("no header\n")
    (elsewhere / "mine.txt").write_text("no header\n")
    return elsewhere


@pytest.mark.parametrize("committed", [False, True])
def test_prune_never_deletes_through_a_link_in_out(tmp_path, committed):
    """`build/ghost -> <tmp>/elsewhere`: compile --prune (what check tells you to run) deletes
    nothing there, writes nothing, and says why, naming the link."""
    root = k8s_repo(tmp_path)
    elsewhere = elsewhere_with_an_orphan(tmp_path, root)
    os.symlink(str(elsewhere), root / "build" / "ghost")
    if committed:
        git("add", "-A", cwd=root)
        git("commit", "-q", "-m", "the pull request", cwd=root)
    before, outside = snapshot(root), snapshot(elsewhere)
    proc = ts("compile", "specs/", "-o", "build", "--prune", cwd=root)
    clean(proc)
    assert proc.returncode == 1
    assert f"build/ghost: is a symbolic link (to {elsewhere}) inside the output folder: compile --prune never " \
           "follows or deletes through a link" in proc.stderr, proc.stderr
    assert "rm -- build/ghost" in proc.stderr
    assert snapshot(elsewhere) == outside and snapshot(root) == before


@pytest.mark.parametrize("where", ["name", "target"])
def test_compile_refuses_a_link_inside_out(tmp_path, where):
    root = k8s_repo(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(root / "build" / "k8s-ddp")
    link = root / "build" / "k8s-ddp"
    if where == "target":
        link.mkdir()
        link = link / "kubernetes"
    os.symlink(str(elsewhere), link)
    before = snapshot(root)
    proc = ts("compile", "specs/", "-o", "build", cwd=root)
    clean(proc)
    assert proc.returncode == 1
    assert f"cannot write {link.relative_to(root)}: is a symbolic link to {elsewhere}" in proc.stderr, proc.stderr
    assert snapshot(root) == before and list(elsewhere.iterdir()) == []


def test_an_output_folder_that_is_a_committed_link_out_of_the_repository_is_refused(tmp_path):
    """A pull request commits `build -> <elsewhere>` (think /home/runner/.ssh): compile writes
    nothing there, prune deletes nothing there, check reads nothing there and says it is a link."""
    root = k8s_repo(tmp_path)
    elsewhere = elsewhere_with_an_orphan(tmp_path, root)
    (elsewhere / "k8s-ddp" / "kubernetes").mkdir(parents=True)
    (elsewhere / "k8s-ddp" / "kubernetes" / "job.yaml").write_text("SECRET_TOKEN=hunter2\n")
    shutil.rmtree(root / "build")
    os.symlink(str(elsewhere), root / "build")
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "the pull request", cwd=root)
    outside = snapshot(elsewhere)
    for command in (["compile", "specs/", "-o", "build"], ["compile", "specs/", "-o", "build", "--prune"],
                    ["check", "specs/", "-o", "build"]):
        proc = ts(*command, cwd=root, env=secret_env())
        clean(proc)
        assert proc.returncode == 1, (command, proc.stderr)
        assert f"leads through the symbolic link {root.resolve() / 'build'}" in proc.stdout + proc.stderr, \
            (command, proc.stdout, proc.stderr)
    assert snapshot(elsewhere) == outside


@pytest.mark.parametrize("depth", ["build", "build/sub"])
def test_an_output_folder_through_a_link_to_another_repository_is_refused(tmp_path, depth):
    """The link's target holding a .git of its own does not make it a repository root."""
    root = k8s_repo(tmp_path)
    other = tmp_path / "other"
    (other / "sub" / ".git").mkdir(parents=True)
    (other / ".git").mkdir()
    shutil.rmtree(root / "build")
    os.symlink(str(other), root / "build")
    before = snapshot(other)
    proc = ts("compile", "specs/", "-o", depth, cwd=root)
    clean(proc)
    assert proc.returncode == 1 and f"leads through the symbolic link {root.resolve() / 'build'}" in proc.stderr, \
        proc.stderr
    assert snapshot(other) == before


@pytest.mark.parametrize("target", ["/proc/self/environ", "../../../.git/config"])
def test_check_reports_a_committed_output_that_is_a_link_and_never_reads_it(tmp_path, target):
    root = k8s_repo(tmp_path)
    job = root / "build" / "k8s-ddp" / "kubernetes" / "job.yaml"
    job.unlink()
    os.symlink(target, job)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "the pull request", cwd=root)
    proc = ts("check", "specs/", "-o", "build", cwd=root, env=secret_env())
    clean(proc)
    assert proc.returncode == 1
    assert f"build/k8s-ddp/kubernetes/job.yaml: link: is a symbolic link (to {target}) inside the output " \
           "directory" in proc.stdout, proc.stdout
    assert "fix: rm -- build/k8s-ddp/kubernetes/job.yaml" in proc.stdout
    assert "hand-edited" not in proc.stdout and "+++" not in proc.stdout


def test_check_with_its_cache_still_reports_a_link_with_the_right_bytes_behind_it(tmp_path):
    """The cache proves outputs equal from their bytes: a link to a copy of the right bytes is still
    a link (never matched, never followed)."""
    root = k8s_repo(tmp_path)
    assert ts("check", "specs/", "-o", "build", cwd=root).returncode == 0  # records the outputs
    job = root / "build" / "k8s-ddp" / "kubernetes" / "job.yaml"
    copy = tmp_path / "copy.yaml"
    shutil.copy(job, copy)
    job.unlink()
    os.symlink(str(copy), job)
    proc = ts("check", "specs/", "-o", "build", cwd=root)
    clean(proc)
    assert proc.returncode == 1 and "job.yaml: link: is a symbolic link" in proc.stdout, proc.stdout


@pytest.mark.parametrize("change", ["link", "edit"])
def test_check_with_its_cache_sees_a_code_folder_change(tmp_path, change):
    """The cache records a shipped folder by its files' bytes and its links (never followed): a link
    added to the code folder makes check compile again and fail, located; an edited file that the
    Kubernetes ConfigMap embeds makes the committed job.yaml hand-edited."""
    root = k8s_repo(tmp_path)
    assert ts("check", "specs/", "-o", "build", cwd=root).returncode == 0  # records the spec
    if change == "link":
        os.symlink("../.git/config", root / "code" / "x")
    else:
        (root / "code" / "train.py").write_text("print('changed')\n")
    proc = ts("check", "specs/", "-o", "build", cwd=root, env=secret_env())
    clean(proc)
    assert proc.returncode == 1
    if change == "link":
        assert "specs/k8s.yaml:8:7: error: code: ../code/x is a symbolic link (to ../.git/config)" in proc.stderr
    else:
        assert "build/k8s-ddp/kubernetes/job.yaml: hand-edited" in proc.stdout, proc.stdout


@pytest.mark.parametrize("target", ["/proc/self/environ", "../../../.git/config"])
def test_diff_names_a_committed_output_that_became_a_link_and_never_reads_it(tmp_path, target):
    """diff --git shows a reviewer the committed outputs that are not what their spec compiles to:
    one that became a link is named (never read, never printed)."""
    root = k8s_repo(tmp_path)
    spec = root / "specs" / "k8s.yaml"
    spec.write_text(spec.read_text().replace("NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO"))
    job = root / "build" / "k8s-ddp" / "kubernetes" / "job.yaml"
    job.unlink()
    os.symlink(target, job)
    proc = ts("diff", "--git", "HEAD", "--format", "json", cwd=root, env=secret_env())
    clean(proc)
    jobs = {j["name"]: j for j in json.loads(proc.stdout)["jobs"]}
    assert jobs["k8s-ddp"]["outputs_edited"] == ["build/k8s-ddp/kubernetes/job.yaml"], proc.stdout
