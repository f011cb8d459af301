"""Said once (issue 30): a change several jobs make identically — a base bumped, a catalog entry,
a runtime version, a conda file — is shown once in `diff --git`, with the jobs it touches, and each
of those jobs' sections points to it; a job's own changes keep their section; nothing that differs
is ever grouped. Real git histories, like test_review_git.py."""

import json
import shutil

from conftest import REPO, edit, git, spec_repo, ts

OLD_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"
NEW_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda12.1-cudnn8-ubuntu22.04"
# per process, Azure ML starts every process: the counts stand in job.yml's own lines, not in each job's command
BASE = f"""version: 1
framework: pytorch
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
distribution: {{launcher: per-process}}
environment:
  image: {OLD_IMAGE}
env: {{NCCL_DEBUG: WARN}}
targets:
  azureml: {{compute: gpu-cluster, timeout: 2d}}
"""
TEAM = [f"team-{i:02d}" for i in range(1, 19)]


def commit(repo, message):
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


def team_repo(tmp_path):
    """spec_repo's three unrelated specs, and 18 jobs on one base, each with its own command."""
    repo = spec_repo(tmp_path)
    (repo / "bases").mkdir()
    (repo / "bases" / "gpu.yaml").write_text(BASE)
    for i, name in enumerate(TEAM, 1):
        (repo / "specs" / f"{name}.yaml").write_text(
            f"extends: ../bases/gpu.yaml\nname: {name}\ncode: ../examples/ddp\ncommand: python train.py --seed {i}\n")
    commit(repo, "eighteen jobs on one base")
    return repo


def sections(markdown):
    """{heading line: the section's text after it} of a diff's markdown."""
    found = {}
    for chunk in markdown.rstrip("\n").split("\n\n## ")[1:]:
        head, _, body = chunk.partition("\n")
        found["## " + head] = body
    return found


def test_a_base_bump_touching_18_jobs_is_one_change_and_18_names(tmp_path):
    repo = team_repo(tmp_path)
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")  # unrelated, same commit
    commit(repo, "bump the base image; single-node on two nodes")

    markdown = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo, check=True).stdout
    assert markdown.startswith("# trainspec diff since HEAD\\~1: 19 jobs changed\n\n## Change A: the same in 18 jobs\n")
    found = sections(markdown)
    change = found.pop("## Change A: the same in 18 jobs")
    assert change.startswith(f"**environment.image {OLD_IMAGE} → {NEW_IMAGE} (in bases/gpu.yaml)**\n\n"
                             "Jobs (18): " + ", ".join(f"`{n}`" for n in TEAM) + "\n\n")
    # the change and its hunk once in the whole comment: the first job's, its own path and hash aside
    assert markdown.count("environment.image") == 1 and markdown.count(f"+  image: {NEW_IMAGE}") == 1
    assert "shown for `team-01`:\n\n```diff\n--- a/build/team-01/azureml/job.yml" in change
    # each job's section points to it, and says nothing else
    for name in TEAM:
        assert found.pop(f"## {name} (specs/{name}.yaml)") == "**change A (above) and nothing else**"
    # the unrelated spec changed in the same commit: its own full section, its hunk
    single = found.pop("## single-node (specs/single-node.yaml)")
    assert single.startswith("**resources.nodes 1 → 2; world 2 → 4**\n\n```diff\n")
    assert "-  instance_count: 1\n+  instance_count: 2\n" in single
    assert found == {}
    assert "unchanged" not in markdown and "trainspec_shim.py" not in markdown  # unchanged runtime files: not listed

    # far smaller than each job said on its own (one job alone has nothing to share)
    alone = ts("diff", "--git", "HEAD~1", "--format", "markdown", "specs/team-01.yaml", cwd=repo, check=True).stdout
    assert "Change A" not in alone and f"+  image: {NEW_IMAGE}" in alone
    said_once = len(markdown) - len("\n\n## single-node (specs/single-node.yaml)\n" + single)
    assert said_once * 5 < 18 * len(alone), (said_once, len(alone))

    # text: the same shape
    text = ts("diff", "--git", "HEAD~1", cwd=repo, check=True).stdout
    heads = [line for line in text.splitlines() if line.startswith("== ")]
    assert heads == ["== change A: the same in 18 jobs", "== single-node (specs/single-node.yaml)",
                     *(f"== {n} (specs/{n}.yaml)" for n in TEAM)]
    assert text.count("environment.image") == 1 and "\njobs (18): " + ", ".join(TEAM) + "\n" in text
    assert text.count("\nchange A (above) and nothing else") == 18

    # json: the groups, and each job its whole diff and the group it is in
    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    [shared] = data["shared"]
    assert shared["id"] == "A" and shared["jobs"] == TEAM and shared["shown_for"] == "team-01"
    assert shared["changes"] == [{"field": "environment.image", "before": OLD_IMAGE, "after": NEW_IMAGE,
                                  "in": "in bases/gpu.yaml"}]
    assert [f["path"] for f in shared["files"]] == ["build/team-01/azureml/job.yml"]
    jobs = {j["name"]: j for j in data["jobs"]}
    assert {n: j["shared"] for n, j in jobs.items()} == {"single-node": None, **{n: "A" for n in TEAM}}
    assert jobs["team-07"]["changes"] == shared["changes"]
    assert f"+  image: {NEW_IMAGE}" in jobs["team-07"]["files"][0]["diff"]
    assert "build/team-07/azureml/job.yml" in jobs["team-07"]["files"][0]["diff"]


def test_jobs_whose_changes_differ_are_not_grouped(tmp_path):
    repo = team_repo(tmp_path)
    # two jobs, each its own different change: two whole sections, no shared change
    edit(repo / "specs" / "team-01.yaml", "--seed 1\n", "--seed 100\n")
    edit(repo / "specs" / "team-02.yaml", "--seed 2\n", "--seed 200\n")
    data = json.loads(ts("diff", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    assert data["shared"] == [] and [(j["name"], j["shared"]) for j in data["jobs"]] == [
        ("team-01", None), ("team-02", None)]
    markdown = ts("diff", "--git", "HEAD", "--format", "markdown", cwd=repo, check=True).stdout
    assert "Change A" not in markdown and "said once" not in markdown
    assert "+command: python -I -S ${{inputs.trainspec_runtime}} -- python train.py --seed 100" in markdown
    assert "+command: python -I -S ${{inputs.trainspec_runtime}} -- python train.py --seed 200" in markdown
    git("checkout", "-q", "--", "specs", cwd=repo)

    # the base bumped, and one job also changes its own command in the same file: the change is
    # said once for all 18, and team-03's section says only its own command, with a hunk of its own
    # line only: the file with change A applied against what it is now (issue 42)
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    edit(repo / "specs" / "team-03.yaml", "--seed 3\n", "--seed 300\n")
    commit(repo, "bump the base image; team-03's own seed")
    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    [shared] = data["shared"]
    assert shared["jobs"] == TEAM
    jobs = {j["name"]: j for j in data["jobs"]}
    assert jobs["team-03"]["shared"] == "A"  # json still has its whole diff
    assert sorted(c["field"] for c in jobs["team-03"]["changes"]) == ["command", "environment.image"]
    assert f"+  image: {NEW_IMAGE}" in jobs["team-03"]["files"][0]["diff"]
    markdown = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo, check=True).stdout
    own = sections(markdown)["## team-03 (specs/team-03.yaml)"]
    assert own.startswith("**change A (above), and: command python train.py --seed 3 → python train.py --seed 300**")
    changed = [line for line in own.splitlines() if line[:1] in ("+", "-") and line[:3] not in ("---", "+++")]
    assert changed == ["-command: python -I -S ${{inputs.trainspec_runtime}} -- python train.py --seed 3",
                       "+command: python -I -S ${{inputs.trainspec_runtime}} -- python train.py --seed 300"]
    assert markdown.count(f"+  image: {NEW_IMAGE}") == 1  # change A's hunk only
    assert "Jobs (18): " in markdown

    # a job that changes a line the shared change also changes (its own image) makes no part of it
    # exactly: its own section, whole
    git("checkout", "-q", "HEAD~1", "--", "specs", "bases", "build", cwd=repo)
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    edit(repo / "specs" / "team-03.yaml", "--seed 3\n", f"--seed 3\nenvironment: {{image: {OLD_IMAGE}-own}}\n")
    commit(repo, "bump the base image; team-03 keeps its own image")
    data = json.loads(ts("diff", "--git", "HEAD~2", "--format", "json", cwd=repo, check=True).stdout)
    [shared] = data["shared"]
    jobs = {j["name"]: j for j in data["jobs"]}
    assert shared["jobs"] == [n for n in TEAM if n != "team-03"] and jobs["team-03"]["shared"] is None


def test_a_shared_change_is_grouped_only_when_every_changed_line_is_the_same():
    """Groups by OutputDiff.key, the lines each output removes and adds: the same fields changed
    with different lines are two changes; a job that makes all of a change and more points to it
    and keeps the rest."""
    from trainspec.review.diff import Change, JobDiff, OutputDiff, render_diffs, said_once

    def job(name, lines, *extra):
        key = ("azureml/job.yml", "changed", "@@", *lines)
        files = [OutputDiff(f"build/{name}/azureml/job.yml", "azureml/job.yml", "\n".join(lines), key=key), *extra]
        return JobDiff(name, f"specs/{name}.yaml", "changed", [Change("env.A", "1", "2", "in bases/b.yaml")],
                       files=files)

    same = ["-  A: \"1\"", "+  A: \"2\""]
    other = ["-  A: \"1\"", "+  A: \"2\"", "-  B: x", "+  B: y"]
    assert said_once([job("a", same), job("b", other)]) == ([], {})
    extra = OutputDiff("build/c/slurm/job.sbatch", "slurm/job.sbatch", "+#SBATCH x", key=("slurm/job.sbatch", "+x"))
    groups, pointers = said_once([job("a", same), job("b", same), job("c", same, extra), job("d", other)])
    assert [(g.id, g.jobs) for g in groups] == [("A", ["a", "b", "c"])] and set(pointers) == {"a", "b", "c"}
    assert pointers["a"].rest.files == [] and pointers["c"].rest.files == [extra]
    text = render_diffs([job("a", same), job("b", same), job("c", same, extra), job("d", other)], "text")
    assert "\nchange A (above), and: outputs changed: slurm/job.sbatch\n" in text
    assert "== d (specs/d.yaml)\nenv.A 1 → 2 (in bases/b.yaml)\n" in text
    # two jobs that change only by hand edits share nothing: each edit is the job's own
    edits = [JobDiff(n, f"specs/{n}.yaml", "changed", edits=[OutputDiff("p", "azureml/job.yml", "+x")], edited=["p"])
             for n in "xy"]
    assert said_once([*edits, job("a", same), job("b", same)])[1].keys() == {"a", "b"}
    # an output that cannot be compared (no key) is never grouped
    loose = [JobDiff(n, f"specs/{n}.yaml", "changed", files=[OutputDiff("p", "azureml/job.yml", "+x")]) for n in "xy"]
    assert said_once(loose) == ([], {})


def test_the_shared_change_is_not_what_is_cut_first():
    """In a comment that must be cut, a change said once (it carries most jobs) stays whole while
    a single job's diff can make room; the document keeps to its budget."""
    from trainspec.review.diff import Change, JobDiff, OutputDiff, render_diffs

    def job(name, marker, count):
        lines = [f"+  {marker}_{k}: \"{k}\"" for k in range(count)]
        key = ("azureml/job.yml", "changed", "@@", *lines)
        diff = "\n".join([f"--- a/build/{name}/azureml/job.yml", f"+++ b/build/{name}/azureml/job.yml", "@@ -1 +1 @@",
                          *lines])
        return JobDiff(name, f"specs/{name}.yaml", "changed", [Change(f"env.{marker}", None, "x")],
                       files=[OutputDiff(f"build/{name}/azureml/job.yml", "azureml/job.yml", diff, key=key)])

    diffs = [job("lone", "OWN", 150), *(job(f"team-{i}", "SHARED", 150) for i in range(5))]
    whole = render_diffs(diffs, "markdown", max_chars=0)
    assert len(whole) > 6_000 and whole.count("SHARED_149") == 1
    cut = render_diffs(diffs, "markdown", max_chars=4_500)
    assert len(cut) <= 4_500 and "Cut to fit one comment" in cut
    assert "SHARED_149" in cut and "OWN_149" not in cut  # the shared diff whole, the lone job's cut
    assert "left out for length" in cut.split("## lone")[1]


def test_a_fix_to_one_catalog_entry_is_said_once_for_the_jobs_on_that_size(tmp_path):
    repo = team_repo(tmp_path)
    (repo / "trainspec-skus.yaml").write_text(
        "skus:\n  Standard_ND96isr_H100_v5:\n    gpus: 8\n    gpu: H100\n    vcpus: 96\n    memory_gb: 1900\n"
        "    infiniband: true\n")
    git("rm", "-q", "-r", "specs/mnist-lightning.yaml", "build/mnist-lightning", cwd=repo)  # 8 GPUs a node of it
    commit(repo, "the team's catalog")
    edit(repo / "trainspec-skus.yaml", "    gpus: 8\n", "    gpus: 4\n")
    data = json.loads(ts("diff", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    [shared] = data["shared"]
    assert shared["jobs"] == TEAM  # the other specs are on other sizes
    assert [j["name"] for j in data["jobs"]] == TEAM and {j["shared"] for j in data["jobs"]} == {"A"}
    assert shared["summary"].startswith("size Standard_ND96isr_H100_v5: gpus 8 → 4 (in trainspec-skus.yaml); world 16 → 8")
    text = ts("diff", "--git", "HEAD", cwd=repo, check=True).stdout
    assert text.count("size Standard_ND96isr_H100_v5: gpus 8 → 4") == 1
    assert text.count("-  process_count_per_instance: 8\n+  process_count_per_instance: 4\n") == 1


def test_one_runtime_version_is_said_once_for_the_jobs_it_changes(monkeypatch, tmp_path):
    """Two jobs compiled by an older trainspec with another shim: the same new shim and the same
    version line in each, said once; the shim's one line, never its source."""
    import shutil

    import trainspec
    from conftest import REPO
    from trainspec.registry.build import build
    from trainspec.compiler import base as compile_base
    from trainspec.review.diff import diff_outcomes, render_diffs, said_once

    specs = [str(REPO / "specs" / name) for name in ("mnist-lightning.yaml", "single-node.yaml")]
    new = [build(spec, REPO / "build") for spec in specs]
    older = tmp_path / "runtime"
    older.mkdir()
    for source in (REPO / "trainspec" / "runtime").glob("*.py"):  # the shim's core, parts and detectors
        shutil.copy(source, older / source.name)
    shim = (older / "shim.py").read_text()
    assert "class Detector:" in shim
    (older / "shim.py").write_text(shim.replace("class Detector:", "class OldDetector:"))
    monkeypatch.setattr(compile_base, "SHIM_SOURCE", older / "shim.py")
    monkeypatch.setattr(trainspec, "__version__", "0.0.9")
    old = [build(spec, REPO / "build") for spec in specs]
    monkeypatch.undo()
    diffs = [diff_outcomes(a, b, "build") for a, b in zip(old, new)]
    groups, pointers = said_once(diffs)
    assert [g.jobs for g in groups] == [["mnist-lightning", "single-node"]]
    assert set(pointers) == {"mnist-lightning", "single-node"}
    text = render_diffs(diffs, "text")
    assert text.count("changed: trainspec runtime v0.0.9 -> v0.1.0") == 1 and "OldDetector" not in text
    assert "no spec field changed; outputs changed: azureml/trainspec_shim.py\n" in text
    assert text.count("\nchange A (above) and nothing else") == 2


# the spec's default launcher (per node, for 8 processes a node): the one every target runs
EVERY_TARGET = BASE.replace("distribution: {launcher: per-process}\n", "") + """  slurm: {partition: hpc, time: 2h}
  kubernetes: {namespace: ml, queue: team-a, timeout: 12h}
  hpcpack: {shared_dir: /app, node_group: LinuxNodes, python: /opt/conda/envs/torch/bin/python}
  ray: {location: eastus, resource_group: rg-trainspec}
"""


def test_a_base_image_bump_is_said_once_on_slurm_and_kubernetes_too(tmp_path):
    """A base that compiles to all five targets: each job's files change in the same lines, though
    its own command sits beside the image (Slurm's srun line runs `--container-image="$image"`, the
    image on a line of its own), so the bump is one change naming every job, on every target."""
    from conftest import slurm_image

    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "bases").mkdir()
    shutil.copytree(REPO / "examples" / "ddp", repo / "examples" / "ddp", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "bases" / "gpu.yaml").write_text(EVERY_TARGET)
    names = [f"team-{i:02d}" for i in range(1, 5)]
    for i, name in enumerate(names, 1):
        (repo / "specs" / f"{name}.yaml").write_text(
            f"extends: ../bases/gpu.yaml\nname: {name}\ncode: ../examples/ddp\ncommand: python train.py --seed {i}\n")
    git("init", "-q", "-b", "main", cwd=repo)
    commit(repo, "four jobs on one base, every target")
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    commit(repo, "bump the base image")

    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    [shared] = data["shared"]
    assert shared["jobs"] == names and {j["name"]: j["shared"] for j in data["jobs"]} == dict.fromkeys(names, "A")
    # every target whose file runs the image; HPC Pack runs the nodes' own software, and says so once
    assert [f["path"] for f in shared["files"]] == [f"build/team-01/{t}" for t in (
        "azureml/job.yml", "kubernetes/job.yaml", "ray/cluster.yaml", "slurm/job.sbatch")]
    assert "image (hpcpack) unchanged: no container" in shared["summary"]
    slurm = shared["files"][3]["diff"]
    assert f"-image='{OLD_IMAGE.replace('/', '#', 1)}'" in slurm and f"+image='{NEW_IMAGE.replace('/', '#', 1)}'" in slurm

    for name in names:  # each job still runs the new image, its own command
        script = (repo / "build" / name / "slurm" / "job.sbatch").read_text()
        assert slurm_image(script) == NEW_IMAGE.replace("/", "#", 1)
        assert script.rstrip().endswith(f" train.py --seed {names.index(name) + 1}")

    markdown = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo, check=True).stdout
    assert markdown.startswith("# trainspec diff since HEAD\\~1: 4 jobs changed\n\n## Change A: the same in 4 jobs\n")
    found = sections(markdown)
    change = found.pop("## Change A: the same in 4 jobs")
    assert "Jobs (4): " + ", ".join(f"`{n}`" for n in names) + "\n" in change
    for name in names:
        assert found.pop(f"## {name} (specs/{name}.yaml)") == "**change A (above) and nothing else**"
    assert found == {}
    # each file's new image once in the whole comment: Azure ML's and Ray's, Kubernetes', Slurm's
    added = [line.split("  #")[0] for line in markdown.splitlines() if line.startswith("+") and "image" in line]
    assert added == [f"+  image: {NEW_IMAGE}", f"+    image: {NEW_IMAGE}", f"+  image: {NEW_IMAGE}",
                     f"+image='{NEW_IMAGE.replace('/', '#', 1)}'"]


def test_the_summary_says_a_shared_change_once_and_says_above_only_what_it_names():
    """The cost summary's rows (issue 42): the same change of what 60 jobs run is one row naming
    the first 50 and counting the others; a value counts as said above (the plan and the diff then
    name its field only) for a job the summary names, never for one it only counts, nor in text."""
    from trainspec.review.cost import Row, Summary

    rows = [Row(f"job-{i:02d}", "changed", access=[("environment.image", "old:1", "new:2")]) for i in range(60)]
    rows += [Row("alone", "changed", changes=[("nodes", 1, 2)], gpus=(8, 16), access=[("command", "a", "b")]),
             Row("twin-1", "changed", changes=[("nodes", 1, 2)], gpus=(8, 16)),
             Row("twin-2", "changed", changes=[("nodes", 1, 2)], gpus=(8, 16))]
    summary = Summary(rows, (0, 0), changed=[("environment.image", 60), ("resources.nodes", 3)])
    md = summary.render("markdown", "cmd")
    assert "\n\n**What changes:** environment.image in 60 jobs; resources.nodes in 3 jobs.\n\n- " in md
    listed = [line for line in md.splitlines() if line.startswith("- ")]
    assert listed == [
        "- **60 jobs** (" + ", ".join(f"`job-{i:02d}`" for i in range(50)) + ", … and 10 more): "
        "**what they run or can reach:** environment.image `old:1` → `new:2`",
        "- **3 jobs** (`alone`, `twin-1`, `twin-2`): nodes `1` → `2`; GPUs `8` → `16`",
        "- `alone`: **what it runs or can reach:** command `a` → `b`"]
    said = summary.said_above("markdown", "cmd")
    assert set(said) == {f"job-{i:02d}" for i in range(50)} | {"alone"}
    assert said["job-00"] == {"new:2": "environment.image"} and said["alone"] == {"b": "command"}
    assert summary.said_above("text") == {}
