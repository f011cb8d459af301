"""The pull-request comment (`plan` + a blank line + `diff`, markdown, as the CI example posts it)
in a real team repository: it fits in one GitHub comment whatever the change, runtime files are
summarised rather than printed, and no spec value can forge its structure -- checked with a real
CommonMark/GFM renderer (markdown-it-py) on real git histories."""

import hashlib
import json
import re
import shutil
from trainspec.core.records import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO, edit, git, spec_repo, ts, yq
from trainspec.runtime import shim_source

LIMIT = 60_000  # the CI example's comment must stay under this (GitHub refuses over 65,536)


@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def comment(repo, base="main"):
    """What examples/ci/github-actions.yml posts: plan, a blank line (echo), diff."""
    plan = ts("plan", "--git", base, "specs/", "--format", "markdown", cwd=repo, check=True).stdout
    diff = ts("diff", "--git", base, "specs/", "--format", "markdown", cwd=repo, check=True).stdout
    return plan + "\n" + diff


def commit(repo, message):
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


class Html(HTMLParser):
    """What a browser would see of rendered markdown: tags, comments, text, table rows."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.tags, self.comments, self.chunks, self.rows, self.headings = [], [], [], [], []
        self._heading = None
        self.feed(html)
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th"):
            self.rows[-1] += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._heading = []

    def handle_endtag(self, tag):
        if re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            self.headings.append((tag, "".join(self._heading)))
            self._heading = None

    def handle_comment(self, data):
        self.comments.append(data)

    def handle_data(self, data):
        self.chunks.append(data)
        if self._heading is not None:
            self._heading.append(data)


def render(markdown):
    from markdown_it import MarkdownIt

    return Html(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown))


# what markdown-it makes of our markdown: nothing else (no raw HTML from a value)
OUR_TAGS = {"h1", "h2", "h3", "p", "ul", "li", "code", "pre", "strong", "em", "table", "thead", "tbody",
            "tr", "th", "td"}


# --- runtime files are summarised ---------------------------------------------------------------

RUNTIME = ("trainspec_shim.py", "trainspec_ray_driver.py", "trainspec_procs.py", "trainspec_ray_request.py")


def test_a_new_ray_job_shows_its_runtime_files_as_name_size_sha256_and_version(repo):
    shutil.copy(REPO / "specs" / "ray-lightning.yaml", repo / "specs" / "ray-lightning.yaml")
    commit(repo, "a Ray job")
    ts("compile", "specs/ray-lightning.yaml", "-o", str(repo / "compiled"), cwd=repo, check=True)
    files = {name: (repo / "compiled" / "ray-lightning" / "ray" / name).read_bytes() for name in RUNTIME}
    shim_line = "class Ray(Detector):"  # any line of the shim's source: it must not be printed
    assert shim_line.encode() in files["trainspec_shim.py"]
    for fmt in ("text", "markdown"):
        out = ts("diff", "--git", "HEAD~1", "--format", fmt, cwd=repo, check=True).stdout
        assert shim_line not in out and "def main" not in out
        for name, data in files.items():
            line = next(l for l in out.splitlines() if f"build/ray-lightning/ray/{name}" in l)
            assert f"{len(data):,} bytes" in line and hashlib.sha256(data).hexdigest() in line
            assert "trainspec runtime v0.1.0 (new job)" in line
        assert "+++ b/build/ray-lightning/ray/cluster.yaml" in out  # the job's own files: diffed whole
    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    runtime = {Path(f["path"]).name: f["runtime"] for f in data["jobs"][0]["files"] if f["runtime"]}
    assert set(runtime) == set(RUNTIME)
    shim = runtime["trainspec_shim.py"]
    assert shim["sha256"] == hashlib.sha256(files["trainspec_shim.py"]).hexdigest()
    assert shim["size"] == len(files["trainspec_shim.py"])
    assert (shim["version_before"], shim["version_after"]) == (None, "0.1.0")
    assert shim["summary"] == "trainspec runtime v0.1.0 (new job)"
    # the comment of that pull request: one comment, well under GitHub's limit (106,661 before)
    text = comment(repo, "HEAD~1")
    assert len(text) < 20_000 and "Cut to fit" not in text


def test_a_changed_job_lists_no_unchanged_runtime_and_a_changed_runtime_says_which_versions(repo):
    from trainspec.registry.build import build
    from trainspec.review.diff import diff_outcomes, render_diffs

    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")
    commit(repo, "two nodes")
    out = ts("diff", "--git", "HEAD~1", cwd=repo, check=True).stdout
    assert "trainspec_shim.py" not in out and "unchanged" not in out  # an unchanged runtime file: not listed
    assert "+  instance_count: 2" in out
    # json still has it, with its size and digest
    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    unchanged = data["jobs"][0]["runtime_unchanged"][0]["runtime"]
    shim_data = shim_source("azureml").encode()  # an Azure ML job's shim
    assert (unchanged["size"], unchanged["sha256"]) == (len(shim_data), hashlib.sha256(shim_data).hexdigest())
    # a job compiled by another trainspec: its runtime file is summarised, versions on both sides
    head = build(str(REPO / "specs" / "ray-lightning.yaml"), Path("build"))
    old_ray = head.artifacts[0]
    shim = old_ray.file("trainspec_shim.py")
    older = replace(shim, data=shim.data.replace(b"class Ray(Detector):", b"class OldDetector(Detector):"),
                    runtime="0.0.9")
    base = replace(head, artifacts=[replace(old_ray, files=tuple(older if f is shim else f for f in old_ray.files))])
    result = diff_outcomes(base, head, "build")
    assert result.status == "changed" and [f.output for f in result.files] == ["ray/trainspec_shim.py"]
    changed = result.files[0].runtime
    assert changed.summary == "changed: trainspec runtime v0.0.9 -> v0.1.0"
    assert changed.sha256 == hashlib.sha256(shim.data).hexdigest()
    assert changed.sha256_before == hashlib.sha256(older.data).hexdigest()
    for fmt in ("text", "markdown"):
        shown = render_diffs([result], fmt)
        shown = render(shown).text if fmt == "markdown" else shown
        assert "changed: trainspec runtime v0.0.9 -> v0.1.0" in shown and "OldDetector" not in shown
        assert "unchanged" not in shown and "trainspec_procs.py" not in shown  # the driver, procs, the request's type
    as_json = json.loads(render_diffs([result], "json"))["jobs"][0]
    assert as_json["files"][0]["runtime"]["version_before"] == "0.0.9"
    assert {Path(f["path"]).name for f in as_json["runtime_unchanged"]} == {
        "trainspec_ray_driver.py", "trainspec_procs.py", "trainspec_ray_request.py"}


K8S_RUNTIME = ("trainspec_shim.py",)  # in job.yaml's shim ConfigMap, Kubeflow's detectors joined in


def test_a_new_kubernetes_job_summarises_the_runtime_files_inside_its_job_yaml(repo):
    from trainspec.registry.build import build

    shutil.copy(REPO / "specs" / "k8s-ddp.yaml", repo / "specs" / "k8s-ddp.yaml")
    commit(repo, "a Kubernetes job")
    embedded = {f.path: f.data for f in build(str(REPO / "specs" / "k8s-ddp.yaml"), Path("build"))
                .artifacts[0].file("job.yaml").embedded}
    assert set(embedded) == set(K8S_RUNTIME)
    source = ("def detect(env: Mapping[str, str]) -> bool:", "class TrainJob(Detector):")  # lines of the shim
    assert all(line.encode() in embedded["trainspec_shim.py"] for line in source)
    for fmt in ("text", "markdown"):
        out = ts("diff", "--git", "HEAD~1", "--format", fmt, cwd=repo, check=True).stdout
        shown = render(out).text if fmt == "markdown" else out
        assert not any(line in shown for line in source) and "def _int(" not in shown
        for name, data in embedded.items():
            lines = [l for l in shown.splitlines() if f"build/k8s-ddp/kubernetes/job.yaml#{name}" in l]
            assert len(lines) == 1, lines  # one line each, naming the file it is in
            assert f"{len(data):,} bytes" in lines[0] and hashlib.sha256(data).hexdigest() in lines[0]
            assert "trainspec runtime v0.1.0 (new job)" in lines[0]
            # job.yaml itself is diffed, each runtime file one placeholder line naming it
            assert f"+  {name}: trainspec runtime file {name}, {len(data):,} bytes, sha256 " \
                   f"{hashlib.sha256(data).hexdigest()}" in shown
        assert "+++ b/build/k8s-ddp/kubernetes/job.yaml" in shown and "+kind: TrainJob" in shown
        assert "+  activeDeadlineSeconds: 43200" in shown
    data = json.loads(ts("diff", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    files = data["jobs"][0]["files"]
    runtime = {f["path"]: f["runtime"] for f in files if f["runtime"]}
    assert set(runtime) == {f"build/k8s-ddp/kubernetes/job.yaml#{name}" for name in K8S_RUNTIME}
    for name, data_ in embedded.items():
        entry = runtime[f"build/k8s-ddp/kubernetes/job.yaml#{name}"]
        assert entry == {"size": len(data_), "sha256": hashlib.sha256(data_).hexdigest(),
                         "summary": "trainspec runtime v0.1.0 (new job)", "version_before": None,
                         "version_after": "0.1.0", "sha256_before": None}
    assert [f["path"] for f in files if not f["runtime"]] == ["build/k8s-ddp/kubernetes/job.yaml"]
    # the markdown of that pull request: a few thousand characters (the code ConfigMap is most
    # of it), not the 60,000 of the shim printed whole
    markdown = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo, check=True).stdout
    assert len(markdown) < 15_000 and "Cut to fit" not in markdown and "left out for length" not in markdown
    assert len(comment(repo, "HEAD~1")) < 20_000


def test_a_changed_shim_inside_job_yaml_is_one_changed_line_and_no_hunk(monkeypatch, tmp_path):
    """A job compiled by a trainspec with another shim: its job.yaml differs only inside the shim
    ConfigMap. The job changed (the real bytes differ), shown as the summary's `changed:` line."""
    import trainspec
    from trainspec.registry.build import build
    from trainspec.compiler import base as compile_base
    from trainspec.review.diff import diff_outcomes, render_diffs

    spec = str(REPO / "specs" / "k8s-ddp.yaml")
    head = build(spec, Path("build"))
    older = tmp_path / "runtime"
    older.mkdir()
    for source in (REPO / "trainspec" / "runtime").glob("*.py"):  # the shim's core, parts and detectors
        shutil.copy(source, older / source.name)
    shim = (older / "shim.py").read_text()
    assert "class Detector:" in shim
    (older / "shim.py").write_text(shim.replace("class Detector:", "class OldDetector:"))
    monkeypatch.setattr(compile_base, "SHIM_SOURCE", older / "shim.py")
    monkeypatch.setattr(trainspec, "__version__", "0.0.9")
    old = build(spec, Path("build"))
    monkeypatch.undo()
    was, now = old.artifacts[0].file("job.yaml"), head.artifacts[0].file("job.yaml")
    assert b"OldDetector" in was.data and was.data != now.data
    result = diff_outcomes(old, head, "build")
    assert result.status == "changed" and [f.output for f in result.files] == ["kubernetes/job.yaml#trainspec_shim.py"]
    changed = result.files[0].runtime
    assert changed.summary == "changed: trainspec runtime v0.0.9 -> v0.1.0"
    assert changed.sha256_before == hashlib.sha256(was.embedded[0].data).hexdigest()
    assert [f.output for f in result.runtime] == []  # the shim is the only runtime file in job.yaml
    for fmt in ("text", "markdown"):
        shown = render_diffs([result], fmt)
        shown = render(shown).text if fmt == "markdown" else shown
        assert "build/k8s-ddp/kubernetes/job.yaml#trainspec_shim.py" in shown
        assert "changed: trainspec runtime v0.0.9 -> v0.1.0" in shown and "OldDetector" not in shown
        assert "@@" not in shown and "+++" not in shown  # no hunk: the placeholder lines are the same
    as_json = json.loads(render_diffs([result], "json"))["jobs"][0]
    assert as_json["files"][0]["runtime"]["version_before"] == "0.0.9"
    assert as_json["runtime_unchanged"] == []


# --- one comment, whatever the change -----------------------------------------------------------

def assert_one_comment(text, names):
    assert len(text) < LIMIT, len(text)
    seen = render(text)
    for name in names:
        assert name in seen.text, name
    return seen


def test_thirty_new_jobs_fit_one_comment_and_every_job_is_named(repo):
    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"job-{i:02d}" for i in range(30)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    commit(repo, "thirty jobs")
    text = comment(repo, "HEAD~1")
    seen = assert_one_comment(text, names)
    assert "Cut to fit one comment" in text
    assert "trainspec diff --git 'HEAD~1' --format text" in seen.text
    assert not seen.comments and set(seen.tags) <= OUR_TAGS
    # the full diff is where the note says: every job's job.yml, whole
    full = ts("diff", "--git", "HEAD~1", "--format", "text", cwd=repo, check=True).stdout
    assert all(f"+++ b/build/{name}/azureml/job.yml" in full for name in names)
    assert "left out for length" not in full
    # --max-chars: the same document within any budget, in text too; 0: not cut
    for budget in (1000, 5000, 12000):
        small = ts("diff", "--git", "HEAD~1", "--format", "text", "--max-chars", str(budget), cwd=repo,
                   check=True).stdout
        assert len(small.rstrip("\n")) <= budget and "trainspec diff --git 'HEAD~1' --format text" in small
    assert ts("diff", "--git", "HEAD~1", "--format", "markdown", "--max-chars", "5000", cwd=repo).stdout.count(
        "job-") >= 30
    uncut = ts("diff", "--git", "HEAD~1", "--format", "markdown", "--max-chars", "0", cwd=repo, check=True).stdout
    assert len(uncut) > 50_000 and "Cut to fit" not in uncut and "left out for length" not in uncut
    bad = ts("diff", "--git", "HEAD~1", "--max-chars", "10", cwd=repo)
    assert bad.returncode == 2 and "--max-chars: 10 is too small" in bad.stderr


def test_a_huge_env_value_fits_one_comment(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    huge = "".join(f"{i:06d}," for i in range(30_000))  # 210,000 characters
    edit(spec, "  NCCL_DEBUG: WARN\n", f"  NCCL_DEBUG: WARN\n  BIG: {huge}\n")
    commit(repo, "a huge value")
    text = comment(repo, "HEAD~1")
    seen = assert_one_comment(text, ["mnist-lightning"])
    assert "(210,000 characters in all)" in seen.text  # the value cut, saying how long it is
    assert "+  BIG: 000000,000001," in seen.text  # the diff's start is still there
    assert "Cut to fit one comment" in text
    full = ts("diff", "--git", "HEAD~1", cwd=repo, check=True).stdout
    assert huge in full  # text: the whole diff


def test_many_jobs_that_cannot_all_be_shown_are_still_named(repo):
    """Past what even headings allow: headings while they fit, then the other jobs on one line,
    by name while the room left allows, then how many more."""
    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"job-{i:03d}" for i in range(120)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    commit(repo, "many jobs")
    out = ts("diff", "--git", "HEAD~1", "--format", "markdown", "--max-chars", "1000", cwd=repo, check=True).stdout
    assert len(out.rstrip("\n")) <= 1000
    seen = render(out)
    named = [n for n in names if n in seen.text]
    assert named == names[:len(named)] and len(named) > 10
    assert f"and {len(names) - len(named)} more" in seen.text
    assert len(out.splitlines()[-3]) < 200  # the last line: a few names, the others counted


# --- a comment a reviewer reads in a minute (issue 42) -------------------------------------------

def test_a_twelve_job_base_bump_with_one_node_change_is_read_in_a_minute(tmp_path):
    """Twelve jobs on one base without a time limit; the base's image bumped, and one job on four
    nodes, in one commit: `trainspec review` opens with one summary (what merging launches, what
    changes in how many jobs, the cost, the image change once for the 12 jobs), says what the 12
    plans share once and per job only what differs, says the bump once in the diff with team-05's
    own lines beside it, and names the new image twice in under 15,000 characters (it was 29,000
    characters naming it 40 times); every job's own command, and team-05's four nodes, still
    there. The cost table says "no maximum" plainly."""
    from test_said_once import NEW_IMAGE, OLD_IMAGE

    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "bases").mkdir()
    shutil.copytree(REPO / "examples" / "ddp", repo / "examples" / "ddp", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "bases" / "gpu.yaml").write_text(
        "version: 1\nframework: pytorch\nresources: {nodes: 2, sku: Standard_ND96isr_H100_v5}\n"
        f"distribution: {{launcher: per-process}}\nenvironment: {{image: {OLD_IMAGE}}}\n"
        "targets:\n  azureml: {compute: gpu-cluster}\n")
    names = [f"team-{i:02d}" for i in range(1, 13)]
    for i, name in enumerate(names, 1):
        (repo / "specs" / f"{name}.yaml").write_text(
            f"extends: ../bases/gpu.yaml\nname: {name}\ncode: ../examples/ddp\ncommand: python train.py --seed {i}\n")
    git("init", "-q", "-b", "main", cwd=repo)
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "twelve jobs on one base")
    edit(repo / "bases" / "gpu.yaml", OLD_IMAGE, NEW_IMAGE)
    with open(repo / "specs" / "team-05.yaml", "a") as spec:
        spec.write("resources: {nodes: 4}\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "bump the base image; team-05 on four nodes")

    text = ts("review", "--git", "HEAD~1", cwd=repo, check=True).stdout
    assert len(text) < 15_000, len(text)
    assert text.count(NEW_IMAGE) <= 2, text.count(NEW_IMAGE)
    seen = render(text)
    assert not seen.comments and set(seen.tags) <= OUR_TAGS
    assert [h for h in seen.headings if h[0] in ("h1", "h2")] == [
        ("h1", "trainspec plan: 12 jobs changed since HEAD~1"), ("h2", "Said once for 12 jobs"),
        *(("h2", f"{n} (specs/{n}.yaml)") for n in names),
        ("h1", "trainspec diff since HEAD~1: 12 jobs changed"), ("h2", "Change A: the same in 12 jobs"),
        *(("h2", f"{n} (specs/{n}.yaml)") for n in names)]

    # one summary first: what merging launches, what changes in how many, the cost, the image once
    summary, plan = text.split("\n## ", 1)[0], text.split("\n# trainspec diff", 1)[0]
    assert summary.startswith("# trainspec plan: 12 jobs changed since HEAD\\~1\n\n**Merging this launches 12 jobs** "
                              "(12 on azureml)\n\n**Cost: GPUs of all jobs: 192 → 208 (\\+16); 1 job with cost changes; "
                              "12 jobs whose command, image or access changes**\n")
    assert "\n\n**What changes:** environment.image in 12 jobs; resources.nodes, world in 1 job.\n\n- " in summary
    rows = [line for line in summary.splitlines() if line.startswith("- ")]
    assert rows == ["- **12 jobs** (" + ", ".join(f"`{n}`" for n in names) + "): **what they run or can reach:** "
                    f"environment.image `{OLD_IMAGE}` → `{NEW_IMAGE}`",
                    "- `team-05`: nodes `2` → `4`; GPUs `16` → `32`"]
    # the cost table words "no maximum" plainly: no "$0.00", no "job(s) with no maximum"
    all_jobs = next(line for line in summary.splitlines() if line.startswith("| **all jobs** |"))
    assert all_jobs.endswith("| no maximum: 12 jobs have no time limit |") and "0.00" not in all_jobs, all_jobs
    assert "| `team-05` | azureml | 16 → 32 (\\+16) |" in summary and "with no maximum" not in text

    # the plan: what the 12 share once (the image named by its field: the summary said it), each
    # job only where it differs: its job, its command; team-05 its world, GPUs, cost and ranks
    sections = {chunk.split("\n", 1)[0]: chunk for chunk in plan.split("\n## ")[1:]}
    shared = sections.pop("Said once for 12 jobs")
    assert "| environment | the new `environment.image`, said above |" in shared
    assert "- image: the new `environment.image`, said above" in shared
    assert "### azureml: world 16 = 2 node(s) x 8 process(es), launcher per-process" in shared
    assert "- time limit: " in shared and "- rank 15 (last): " in shared
    for i, name in enumerate(names, 1):
        own = sections.pop(f"{name} (specs/{name}.yaml)")
        assert f"- command: `python train.py --seed {i}`" in own and f"build/{name}/azureml/job.yml" in own
        assert ("world 32 = 4 node(s)" in own) == (name == "team-05") and "- time limit:" not in own
        assert ("- rank 31 (last): " in own and "GPUs: `32 (4 nodes x 8)" in own) == (name == "team-05")
    assert sections == {}

    # the diff: the bump once, for all 12, its values said above; team-05's own lines beside it
    diff = text.split("\n# trainspec diff", 1)[1]
    assert "## Change A: the same in 12 jobs\n**environment.image → its new value, said above (in bases/gpu.yaml)**" \
        in diff and "Jobs (12): " + ", ".join(f"`{n}`" for n in names) in diff
    assert diff.count(f"+  image: {NEW_IMAGE}") == 1
    own = diff.split("## team-05 (specs/team-05.yaml)\n", 1)[1].split("\n## ", 1)[0]
    assert own.startswith("**change A (above), and: resources.nodes 2 → 4; world 16 → 32**")
    changed = [line for line in own.splitlines() if line[:1] in ("+", "-") and line[:3] not in ("---", "+++")]
    assert changed == ["-  instance_count: 2", "+  instance_count: 4", '-  TRAINSPEC_NODES: "2"',
                       '+  TRAINSPEC_NODES: "4"']
    for name in names:
        if name != "team-05":
            assert f"## {name} (specs/{name}.yaml)\n**change A (above) and nothing else**" in diff

    # nothing is lost: `diff` alone still names the values, and json has every job's whole diff and plan
    alone = ts("diff", "--git", "HEAD~1", "--format", "markdown", cwd=repo, check=True).stdout
    assert f"**environment.image {OLD_IMAGE} → {NEW_IMAGE} (in bases/gpu.yaml)**" in alone
    data = json.loads(ts("review", "--git", "HEAD~1", "--format", "json", cwd=repo, check=True).stdout)
    assert [j["image"] for j in data["plan"]["jobs"]] == [NEW_IMAGE] * 12
    assert all(f"+  image: {NEW_IMAGE}" in j["files"][0]["diff"] for j in data["diff"]["jobs"])


# --- no spec value can forge the comment --------------------------------------------------------

HOSTILE = ["ok\n<!--", "a`b``c", "x|y", "<script>alert(1)</script>", "</details>", "```\nfence\n```",
           "ok\n::error::forged", "&amp; *em* _u_ [l](http://x) ~~s~~ \\| \\` # <b>"]


def hostile_spec(values, name):
    env = "".join(f"  V{i}: {yq(v)}\n" for i, v in enumerate(values))
    inputs = "".join(f"  in{i}:\n    value: {yq(v)}\n" for i, v in enumerate(values))
    return (f"version: 1\nname: {name}\ncode: ../examples/mnist\ncommand: python train.py\nframework: pytorch\n"
            "resources:\n  nodes: 1\n  gpus_per_node: 2\n  sku: Standard_NC48ads_A100_v4\n"
            f"environment:\n  image: {yq('img`x|y<!--')}\nenv:\n{env}inputs:\n{inputs}")


def shown(value):
    """How a value reads in the comment: as written, or with its line breaks escaped (JSON)."""
    return json.dumps(value) if "\n" in value else value


def test_no_spec_value_can_forge_the_comment(repo):
    (repo / "specs" / "hostile.yaml").write_text(hostile_spec(["plain"] * len(HOSTILE), "hostile"))
    commit(repo, "a plain job")
    (repo / "specs" / "hostile.yaml").write_text(hostile_spec(HOSTILE, "hostile"))
    odd_file = "new `x`|y<!--.yaml"  # a spec's file name is shown too
    (repo / "specs" / odd_file).write_text(hostile_spec(HOSTILE, "fresh"))
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")  # a third job, after them
    text = comment(repo, "HEAD")
    seen = assert_one_comment(text, ["hostile", "fresh", "single-node"])
    assert not seen.comments and set(seen.tags) <= OUR_TAGS, (seen.comments, set(seen.tags) - OUR_TAGS)
    headings = [h for tag, h in seen.headings if tag == "h2"]
    for job in ("fresh", "hostile", "single-node"):  # every job's heading, in plan and in diff
        assert sum(h.startswith(f"{job} (") for h in headings) == 2, headings
    assert f"fresh (specs/{odd_file})" in headings
    # the cost table first (job, target, GPUs, price per hour, the most), header and a row per job
    # and target, its totals too; then every table row of the plan: a label and a value
    cost_rows = text.split("\n## ", 1)[0].count("\n| ") - 1  # less the |---| line
    assert cost_rows >= 3 and seen.rows[:cost_rows] == [5] * cost_rows, seen.rows
    assert all(cells == 2 for cells in seen.rows[cost_rows:]), seen.rows
    for value in HOSTILE:
        assert shown(value) in seen.text, value  # the value's text, verbatim (line breaks escaped)
    assert 'V0 plain → "ok\\n<!--"' in seen.text  # the diff's summary line
    assert "```\nfence\n```" not in text.replace(json.dumps("```\nfence\n```"), "")  # never a raw fence line
    # text (a CI log): no line can be read as a workflow command
    for command in ("plan", "diff"):
        out = ts(command, "--git", "HEAD", "specs/", cwd=repo, check=True).stdout
        assert not [line for line in out.splitlines() if line.lstrip().startswith("::")]
        assert '"ok\\n::error::forged"' in out
    # a warning starts with its spec's path: a file named like a workflow command is escaped (a
    # diagnostic's line is never a workflow command, core/diagnostics.py shown_line)
    spec = repo / "specs" / "::error::x.yaml"
    spec.write_text((repo / "specs" / "single-node.yaml").read_text().replace("  pip:", "  python: '3.10'\n  pip:"))
    out = ts("plan", spec.name, cwd=spec.parent, check=True).stdout
    assert '  \\::error::x.yaml:' in out and not [line for line in out.splitlines() if line.lstrip().startswith("::")]


# --- plan shows the env the job gets ------------------------------------------------------------

def test_plan_shows_env_values_rendered_as_the_compiled_job_has_them(repo, tmp_path):
    from ruamel.yaml import YAML

    spec = repo / "specs" / "single-node.yaml"
    edit(spec, "framework: lightning\n", "framework: lightning\nvars:\n  lr: 2e-05\nenv:\n"
         "  LR: \"{{ vars.lr }}\"\n  RUN: \"{{ name }}-{{ nodes }}x{{ procs_per_node }}\"\n")
    plan = json.loads(ts("plan", "specs/single-node.yaml", "--format", "json", cwd=repo, check=True).stdout)
    env = plan["jobs"][0]["targets"][0]["ranks"]["first"]
    assert (env["LR"], env["RUN"]) == ("2e-05", "single-node-1x2")
    ts("compile", "specs/single-node.yaml", "-o", str(tmp_path), cwd=repo, check=True)
    job = YAML(typ="safe").load((tmp_path / "single-node" / "azureml" / "job.yml").read_text())
    assert {k: job["environment_variables"][k] for k in ("LR", "RUN")} == {"LR": "2e-05", "RUN": "single-node-1x2"}
    text = ts("plan", "specs/single-node.yaml", "--var", "lr=3e-4", cwd=repo, check=True).stdout
    ts("compile", "specs/single-node.yaml", "--var", "lr=3e-4", "-o", str(tmp_path), cwd=repo, check=True)
    job = YAML(typ="safe").load((tmp_path / "single-node" / "azureml" / "job.yml").read_text())
    assert f" LR={job['environment_variables']['LR']} " in text and "{{" not in text
