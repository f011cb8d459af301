"""`trainspec init`: a starting repository, as a new user gets it -- in an empty folder and in a
repository of their own -- validates, compiles and passes its own CI workflow's steps and
pre-commit hooks as written, and never replaces a file that is there."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import REPO, edit, git, run, ts
from test_ci_example import PATH, WORKFLOW, tool
from test_review import pre_commit_tool, readme_block
from trainspec.registry import DEFAULT_TARGET, TARGETS

SCAFFOLD = REPO / "trainspec" / "scaffold" / "files"
WRITTEN = [".github/workflows/training-specs.yml", ".gitignore", ".pre-commit-config.yaml", "bases/gpu.yaml", "code/{}/train.py",
           "schema/trainspec.base.schema.json", "schema/trainspec.schema.json", "specs/README.md", "specs/{}.yaml",
           "trainspec-skus.yaml"]


def files_in(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)


def init(*args, cwd):
    return ts("init", *args, cwd=cwd)


def commit(repo: Path, message: str):
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).strip()


def started(tmp_path: Path, *args) -> Path:
    """``trainspec init`` in an empty folder, the outputs compiled and everything committed on main."""
    repo = tmp_path / "first-jobs"
    repo.mkdir()
    proc = init(*args, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "a first job")
    return repo


def test_init_in_an_empty_folder_validates_compiles_and_checks(tmp_path):
    repo = tmp_path / "ML Infra"
    repo.mkdir()
    proc = init(cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert files_in(repo) == sorted(p.format("ml-infra") for p in WRITTEN)  # the job is named after the folder
    assert f"wrote {len(WRITTEN)} files in . (job ml-infra, target(s) {DEFAULT_TARGET}):\n" in proc.stdout
    assert "  specs/ml-infra.yaml\n" in proc.stdout
    # a folder in no repository becomes one, on the branch the workflow's push trigger names
    assert git("symbolic-ref", "HEAD", cwd=repo).strip() == "refs/heads/main"
    assert "git init:" in proc.stdout
    steps = proc.stdout.split("next:\n", 1)[1]
    assert steps.index("trainspec validate --strict specs/") < steps.index("trainspec compile specs/ -o build/")

    # the next steps, as printed
    validate = ts("validate", "--strict", "specs/", cwd=repo)
    assert validate.returncode == 0 and validate.stderr == "1 spec: 0 errors, 0 warnings\n", validate.stderr
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "a first job")
    check = ts("check", "specs/", "--out", "build/", cwd=repo)
    assert check.returncode == 0, check.stdout + check.stderr
    job = (repo / "build" / "ml-infra" / DEFAULT_TARGET / "job.yml").read_text()
    assert "tags:\n  trainspec_spec: specs/ml-infra.yaml\n" in job
    # the base is what the spec extends, and the team catalog what names the cluster's size
    plan = ts("plan", "specs/", cwd=repo, check=True).stdout
    assert "in trainspec-skus.yaml" in plan and "world 16 = 2 node(s) x 8 process(es)" in plan
    # a base edit reaches the job, through the base's own line
    edit(repo / "bases" / "gpu.yaml", "  nodes: 2\n", "  nodes: 0\n")
    bad = ts("validate", "specs/", cwd=repo)
    assert bad.returncode == 1 and "bases/gpu.yaml:9:10: error: resources.nodes:" in bad.stderr, bad.stderr


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_target_validates_and_compiles_as_written(tmp_path, target):
    repo = tmp_path / "repo"
    proc = init(str(repo), "--name", "sft", "-t", target, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"(job sft, target(s) {target})" in proc.stdout and "  cd " in proc.stdout
    validate = ts("validate", "specs/", cwd=repo)
    assert validate.returncode == 0 and "0 errors" in validate.stderr, validate.stderr
    compiled = ts("compile", "specs/", "-o", "build/", cwd=repo)
    assert compiled.returncode == 0, compiled.stderr
    assert [p.name for p in (repo / "build" / "sft").iterdir()] == [target]


def test_every_target_has_its_settings_in_the_scaffold():
    assert sorted(p.stem for p in (SCAFFOLD / "targets").glob("*.yaml")) == sorted(TARGETS)


def test_init_again_refuses_and_replaces_nothing(tmp_path):
    repo = started(tmp_path)
    edit(repo / "bases" / "gpu.yaml", "timeout: 12h", "timeout: 3h")
    before = {p: (repo / p).read_bytes() for p in files_in(repo)}
    for args in ([], ["--name", "other", "-t", "slurm"]):
        proc = init(*args, cwd=repo)
        assert proc.returncode == 1
        assert proc.stdout == ""
        assert "would be replaced; nothing written" in proc.stderr
        assert "  bases/gpu.yaml\n" in proc.stderr and "  trainspec-skus.yaml\n" in proc.stderr
        assert {p: (repo / p).read_bytes() for p in files_in(repo)} == before  # nothing new, nothing changed
    forced = init("--force", cwd=repo)
    assert forced.returncode == 0, forced.stderr
    assert "timeout: 12h" in (repo / "bases" / "gpu.yaml").read_text()


def test_one_file_in_the_way_stops_every_file(tmp_path):
    (tmp_path / "trainspec-skus.yaml").write_text("skus: {}\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "job.yaml").symlink_to("/etc/passwd")  # a link counts as a file there
    os.symlink(tmp_path / "elsewhere", tmp_path / "code")  # and a folder on the way that is a link
    proc = init("--name", "job", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[1:] == ["  code/ is a link", "  specs/job.yaml", "  trainspec-skus.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code", "specs", "trainspec-skus.yaml"]
    assert not (tmp_path / ".git").exists()


def tree(root: Path):
    """Every entry under ``root`` (links as what they say, files as their bytes), .git aside."""
    found = {}
    for path in sorted(root.rglob("*")):
        if ".git" in path.relative_to(root).parts:
            continue
        key = str(path.relative_to(root))
        found[key] = ("link", os.readlink(path)) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return found


def test_force_replaces_a_link_and_never_writes_through_one(tmp_path):
    outside = tmp_path / "outside"
    (outside / "specs").mkdir(parents=True)
    (outside / "catalog.yaml").write_text("kept\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    # a link where a file goes: replaced by the file, what it leads to untouched
    (repo / "trainspec-skus.yaml").symlink_to(outside / "catalog.yaml")
    (repo / ".pre-commit-config.yaml").symlink_to("../outside/new.yaml")  # leads nowhere yet
    proc = init("--force", "--name", "job", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    for name in ("trainspec-skus.yaml", ".pre-commit-config.yaml"):
        assert not (repo / name).is_symlink() and (repo / name).read_bytes() == (SCAFFOLD / name.lstrip(".")).read_bytes()
    assert tree(outside) == {"catalog.yaml": b"kept\n", "specs": "dir"}
    # a folder on the way that is a link: refused, nothing written anywhere
    (repo / "bases" / "gpu.yaml").write_text("edited\n")
    shutil.rmtree(repo / "specs")
    (repo / "specs").symlink_to(outside / "specs")
    before = tree(repo)
    proc = init("--force", "--name", "job", cwd=repo)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[1:] == ["  specs/ is a link"]
    assert "nothing written" in proc.stderr.splitlines()[0] and proc.stdout == ""
    assert tree(repo) == before and tree(outside) == {"catalog.yaml": b"kept\n", "specs": "dir"}


def test_force_writes_all_or_nothing(tmp_path, monkeypatch, capsys):
    """A rename that fails after four files took their places (a full disk, a file system gone
    read-only): the four are put back as they were, the replaced files and links return, the
    temporary files and the folders made for them go."""
    from trainspec import cli

    repo = started(tmp_path)
    edit(repo / "bases" / "gpu.yaml", "timeout: 12h", "timeout: 3h")
    (repo / "specs" / "README.md").unlink()
    (repo / "specs" / "README.md").symlink_to("../bases/gpu.yaml")
    shutil.rmtree(repo / "schema")
    before = tree(repo)
    renames = []

    def failing(real):
        def rename(source, destination):
            renames.append(destination)
            if len(renames) == 9:
                raise OSError(28, "No space left on device", str(destination))
            return real(source, destination)
        return rename

    for name in ("rename", "replace"):
        monkeypatch.setattr(os, name, failing(getattr(os, name)))
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit) as exc:
        cli.main(["init", "--force"])
    assert exc.value.code == 1
    assert "No space left on device; nothing written" in capsys.readouterr().err
    assert tree(repo) == before
    assert len(renames) > 9  # it got that far, then put everything back


def leave_what_a_submit_leaves(repo: Path, name: str):
    """What a Slurm submit leaves where it ran, as commands/jobs.py and the compiled job.sbatch
    write it (.trainspec/jobs/<name>/<target>/, .trainspec/runs/<job id>/, <name>-<job id>.out
    and .err where sbatch ran), without the ``*`` that submit writes into .trainspec/.gitignore:
    the repository's own .gitignore ignores them by itself."""
    for path in (f".trainspec/jobs/{name}/slurm/job.sbatch", f".trainspec/jobs/{name}/slurm/code/train.py",
                 ".trainspec/runs/4242/train.py", f"{name}-4242.out", f"{name}-4242.err", f"logs/{name}-17.out"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("x\n")


def test_what_a_submit_leaves_is_never_committed(tmp_path):
    """init's next steps end with `git add -A`: the staged jobs, the folders Slurm jobs run in and
    their output files stay out of it, in a new repository and in one with a .gitignore of its
    own (whose lines are kept, the missing ones added once)."""
    repo = tmp_path / "new"
    repo.mkdir()
    assert init("--name", "sft", "-t", "slurm", cwd=repo).returncode == 0
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "a first job")
    assert "--output=%x-%j.out" in (repo / "build" / "sft" / "slurm" / "job.sbatch").read_text()
    leave_what_a_submit_leaves(repo, "sft")
    (repo / "notes.out").write_text("mine\n")  # an .out file of the user's own is still theirs
    git("add", "-A", cwd=repo)
    assert git("status", "--porcelain", cwd=repo) == "A  notes.out\n"

    team = tmp_path / "team"
    team.mkdir()
    git("init", "-q", "-b", "main", cwd=team)
    (team / ".gitignore").write_text("__pycache__/\n*.log")  # no newline at its end
    proc = init("--name", "sft", cwd=team)
    assert proc.returncode == 0, proc.stderr
    assert "  .gitignore   (the lines it lacked, added at its end)\n" in proc.stdout
    ignore = (team / ".gitignore").read_text()
    assert ignore.startswith("__pycache__/\n*.log\n\n# trainspec: ")
    assert ignore.endswith("\n.trainspec/\n*-[0-9]*.out\n*-[0-9]*.err\n")
    leave_what_a_submit_leaves(team, "sft")
    git("add", "-A", cwd=team)
    status = git("status", "--porcelain", cwd=team)
    assert ".trainspec" not in status and "sft-4242" not in status and "sft-17" not in status, status
    # again, with --force: every line is there, so the file is left as it is, never doubled
    forced = init("--force", "--name", "sft", cwd=team)
    assert forced.returncode == 0 and ".gitignore" not in forced.stdout
    assert (team / ".gitignore").read_text() == ignore
    # a link there is a file in the way like any other: never read nor written through
    (team / ".gitignore").unlink()
    (team / ".gitignore").symlink_to("../elsewhere")
    again = init("--name", "other", cwd=tmp_path / "team")
    assert again.returncode == 1 and "  .gitignore\n" in again.stderr and not (tmp_path / "elsewhere").exists()


def test_init_in_an_existing_repository(tmp_path):
    repo = tmp_path / "team"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README.md").write_text("# our team\n")
    commit(repo, "the team's repository")
    proc = init("--name", "llm-sft", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "git init" not in proc.stdout  # its repository is the one there
    assert (repo / "README.md").read_text() == "# our team\n"
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "trainspec")
    assert ts("check", "specs/", "--out", "build/", cwd=repo).returncode == 0
    # a folder below a repository's root: GitHub would never run its workflow there, and init says so
    sub = init("ml", "--name", "sub", cwd=repo)
    assert sub.returncode == 0 and "git init" not in sub.stdout
    assert f"note: ml is inside the repository {repo.resolve()}: GitHub runs only the workflows of its root's" \
        in sub.stderr


@pytest.mark.parametrize("name", ["My Job", "-x", "a" * 64, "job\n::error::x", ""])
def test_a_name_that_is_no_job_name_is_refused(tmp_path, name):
    proc = init(f"--name={name}", cwd=tmp_path)
    assert proc.returncode == 2 and "is not a job name" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_workflow_is_the_ci_example_and_passes_actionlint(tmp_path):
    assert (SCAFFOLD / "github-actions.yml").read_bytes() == WORKFLOW.read_bytes(), \
        "cp examples/ci/github-actions.yml trainspec/scaffold/files/github-actions.yml"
    repo = started(tmp_path)
    workflow = repo / ".github" / "workflows" / "training-specs.yml"
    assert workflow.read_bytes() == WORKFLOW.read_bytes()
    proc = subprocess.run([tool("actionlint"), str(workflow.relative_to(repo))], cwd=repo, capture_output=True,
                          text=True, env=dict(os.environ, PATH=PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def run_steps(repo: Path, job: str, env: dict, skip=("Install trainspec",)):
    """Every `run:` step of the repository's own workflow ``job`` (the installed trainspec stands in for
    the install step), in order, as the runner runs it; stops at the first that fails."""
    workflow = YAML(typ="safe", pure=True).load((repo / ".github" / "workflows" / "training-specs.yml").read_text())
    done = []
    for step in workflow["jobs"][job]["steps"]:
        if "run" not in step or step.get("name") in skip or "trainspec submit" in step["run"]:
            continue
        script = repo.parent / "step.sh"
        script.write_text(step["run"])
        step_env = {k: env[k] for k in step.get("env", {}) if k in env}
        runner = {k: v for k, v in env.items() if k.startswith(("GITHUB_", "RUNNER_"))}
        proc = run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], repo,
                   env=dict(os.environ, PATH=PATH, **step_env, **runner))
        assert proc.returncode == 0, f"{step.get('name')}:\n{proc.stdout}{proc.stderr}"
        done.append(step.get("name"))
    return done


def test_the_workflow_steps_pass_on_a_pull_request_and_its_merge(tmp_path):
    repo = started(tmp_path, "--name", "sft")
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    git("checkout", "-q", "-b", "bigger", cwd=repo)
    edit(repo / "bases" / "gpu.yaml", "  nodes: 2\n", "  nodes: 4\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "4 nodes")
    temp = tmp_path / "runner-temp"  # $RUNNER_TEMP: where the steps write, outside the checkout
    temp.mkdir()
    done = run_steps(repo, "review", {"BASE": "main", "RUNNER_TEMP": str(temp)})
    assert len(done) >= 3 and any("Validate" in name for name in done) and any("Gate" in name for name in done)
    comment = (temp / "comment.md").read_text()
    assert "sft" in comment and "resources.nodes" in comment and "16" in comment and "32" in comment
    # merged: the submit job's gate and plan list the job for Azure ML (its submit step needs Azure)
    git("checkout", "-q", "main", cwd=repo)
    git("merge", "-q", "--no-ff", "-m", "merge", "bigger", cwd=repo)
    output = tmp_path / "github_output"
    output.write_text("")
    run_steps(repo, "submit", {"BEFORE": first, "GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(temp)})
    assert output.read_text() == ("count=1\n" if DEFAULT_TARGET == "azureml" else "count=0\n")


def test_the_pre_commit_config_runs_trainspec_hooks(tmp_path):
    repo = started(tmp_path)
    config = YAML(typ="safe", pure=True).load((repo / ".pre-commit-config.yaml").read_text())
    shipped = {hook["id"] for hook in YAML(typ="safe", pure=True).load((REPO / ".pre-commit-hooks.yaml").read_text())}
    ids = [hook["id"] for repo_ in config["repos"] for hook in repo_["hooks"]]
    assert sorted(ids) == sorted(shipped)
    # the hooks the GitOps page documents (and tests/test_hooks.py runs), as they are there
    assert (repo / ".pre-commit-config.yaml").read_text().endswith(readme_block("repo: local"))
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-cache"), PATH=PATH)
    hooks = run([pre_commit_tool(), "run", "--all-files"], repo, env=env)
    assert hooks.returncode == 0, hooks.stdout + hooks.stderr
    assert re.search(r"^trainspec validate\.+Passed$", hooks.stdout, re.M), hooks.stdout
    edit(repo / "build" / "first-jobs" / DEFAULT_TARGET / "job.yml", "instance_count: 2", "instance_count: 3")
    stale = run([pre_commit_tool(), "run", "--all-files"], repo, env=env)
    assert stale.returncode == 1 and "hand-edited" in stale.stdout


def test_a_built_wheel_carries_the_scaffold_and_init_runs_from_it(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "trainspec", source / "trainspec", ignore=shutil.ignore_patterns("__pycache__"))
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".", "-w",
                 str(tmp_path / "wheel")], source)
    assert built.returncode == 0, built.stderr
    wheel, = (tmp_path / "wheel").glob("trainspec-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packaged = sorted(str(p.relative_to(REPO)) for p in SCAFFOLD.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert packaged and all(name in names for name in packaged), sorted(set(packaged) - set(names))
    # installed from the wheel alone (its own copy first on the path), init writes the same repository
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    repo = tmp_path / "repo"
    proc = run([sys.executable, "-m", "trainspec.cli", "init", str(repo), "--name", "x"], tmp_path,
               env=dict(os.environ, PYTHONPATH=str(site)))
    assert proc.returncode == 0, proc.stderr
    assert files_in(repo) == sorted(p.format("x") for p in WRITTEN)
    where = run([sys.executable, "-c", "import trainspec.scaffold.repository as r; print(r.FILES)"], tmp_path,
                env=dict(os.environ, PYTHONPATH=str(site))).stdout.strip()
    assert Path(where) == site / "trainspec" / "scaffold" / "files"
    assert (repo / "bases" / "gpu.yaml").read_bytes() == (Path(where) / "base.yaml").read_bytes().replace(
        b"__TARGETS__\n", b"  " + DEFAULT_TARGET.encode() + b":\n" + b"".join(
            b"    " + line + b"\n" for line in (SCAFFOLD / "targets" / f"{DEFAULT_TARGET}.yaml").read_bytes().splitlines()))


@pytest.mark.realproc
def test_the_training_script_runs_locally_as_written(tmp_path):
    """The printed `run --local` of specs/README.md: the job's two processes on CPU, as Azure ML would start them
    (one torchrun on the node: the default launcher for two processes)."""
    pytest.importorskip("torch", reason="torch is a test extra: pip install torch==2.13.0 first")
    repo = started(tmp_path, "--name", "ddp")
    readme = (repo / "specs" / "README.md").read_text()
    line = next(l for l in readme.splitlines() if l.startswith("trainspec run "))
    args = line.split("#")[0].split()[1:]
    assert args == ["run", "specs/ddp.yaml", "--local", "--nodes", "1", "--procs-per-node", "2"]
    proc = ts(*args, "--timeout", "240", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # per node (the default for two processes): the platform starts the node's one launcher, whose
    # torchrun starts both workers; the node's lines say node 0
    assert "[node 0] world 2: 100 steps, last loss" in proc.stdout + proc.stderr
    assert "all 1 processes exited 0" in proc.stdout + proc.stderr
