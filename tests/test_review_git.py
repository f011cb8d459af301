"""What a pull request review lists, in a real git repository: a job is listed when the job that
would be submitted changes (its compiled bytes, a file it references, the code it uploads, a
committed output edited by hand) and never for a comment, a rename or another job's size; one
job name belongs to one spec; a base revision with links that leave the tree still reviews."""

import json
import os
import shutil

import pytest

from conftest import edit, git, spec_repo, ts


@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def planned(repo, base="HEAD"):
    proc = ts("plan", "--git", base, "--format", "json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return [j["name"] for j in data["jobs"]], data["removed"]


def diffed(repo, base="HEAD"):
    proc = ts("diff", "--git", base, "--format", "json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return {j["name"]: j for j in json.loads(proc.stdout)["jobs"]}


def commit(repo, message):
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


# --- one job name, one spec ------------------------------------------------------------------------

def test_a_copied_spec_that_keeps_its_name_is_an_error_in_every_command(repo):
    assert ts("check", "specs/", "--out", "build/", cwd=repo).returncode == 0  # check's cache is warm
    shutil.copy(repo / "specs" / "single-node.yaml", repo / "specs" / "a-copy.yaml")  # sorts first
    edit(repo / "specs" / "a-copy.yaml", "  nodes: 1\n", "  nodes: 2\n")
    blame = "specs/a-copy.yaml:4:7: error: name: job name 'single-node' is also the name of specs/single-node.yaml:4"
    plain = "specs/single-node.yaml:4:7: error: name: job name 'single-node' is also the name of specs/a-copy.yaml:4"
    for command in (["validate", "specs/"], ["check", "specs/", "--out", "build/"], ["plan", "specs/"],
                    ["compile", "specs/", "-o", "build/"]):
        proc = ts(*command, cwd=repo)
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        # without a revision to tell which came first, the later one in path order is blamed
        assert plain in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert git("status", "--porcelain", "--", "build/", cwd=repo) == ""  # compile wrote nothing
    # against the base revision, the copy is the newcomer: it is the one named
    for command in (["diff", "--git", "HEAD"], ["plan", "--git", "HEAD"]):
        proc = ts(*command, cwd=repo)
        assert proc.returncode == 1 and blame in proc.stderr, (command, proc.stderr)
    # the copy renamed: two jobs, the new one planned
    edit(repo / "specs" / "a-copy.yaml", "name: single-node", "name: two-nodes")
    assert planned(repo) == (["two-nodes"], [])
    assert ts("validate", "specs/", cwd=repo).returncode == 0


# --- what "changed" means --------------------------------------------------------------------------

def test_a_comment_formatting_or_a_rename_changes_no_job(repo):
    spec = repo / "specs" / "mnist-lightning.yaml"
    edit(spec, "version: 1\n", "version: 1  # reviewed\n\n")
    commit(repo, "comments")  # the committed outputs now carry the new spec hash in their header
    assert planned(repo, "HEAD~1") == ([], [])
    assert diffed(repo, "HEAD~1") == {}
    git("mv", "specs/mnist-lightning.yaml", "specs/mnist.yaml", cwd=repo)
    commit(repo, "rename")
    assert planned(repo, "HEAD~1") == ([], [])  # the same job: nothing to submit again
    text = ts("diff", "--git", "HEAD~1", cwd=repo, check=True).stdout
    assert text == "no job changes since HEAD~1\n"


def test_a_fix_to_one_size_in_the_team_catalog_lists_only_the_jobs_it_changes(repo):
    (repo / "trainspec-skus.yaml").write_text(
        "skus:\n  Standard_NC48ads_A100_v4:\n    gpus: 2\n    gpu: A100\n    vcpus: 48\n    memory_gb: 440\n"
        "    infiniband: false\n")
    edit(repo / "specs" / "single-node.yaml", "  gpus_per_node: 2\n", "")  # the size says how many
    commit(repo, "team catalog")
    edit(repo / "trainspec-skus.yaml", "    gpus: 2\n", "    gpus: 1\n")
    jobs = diffed(repo)
    assert list(jobs) == ["single-node"]  # every job reads the file; only this one is on that size
    summary = jobs["single-node"]["summary"]
    assert summary.startswith("size Standard_NC48ads_A100_v4: gpus 2 → 1 (in trainspec-skus.yaml); world 2 → 1"), \
        summary
    # a fix that does not change what is submitted (Azure ML's job does not say InfiniBand) lists nothing
    git("checkout", "-q", "--", "trainspec-skus.yaml", cwd=repo)
    edit(repo / "trainspec-skus.yaml", "infiniband: false", "infiniband: true")
    assert planned(repo) == ([], [])


def test_the_code_a_job_uploads_and_the_files_it_references_change_the_job(repo):
    with open(repo / "examples" / "mnist" / "train.py", "a") as fh:
        fh.write("# a different model\n")
    (repo / "examples" / "mnist" / "helpers.py").write_text("X = 1\n")  # not committed yet
    jobs = diffed(repo)
    assert sorted(jobs) == ["mnist-lightning", "single-node"]  # both upload examples/mnist
    for job in jobs.values():
        assert job["files"] == [] and job["changes"] == []
        assert job["code_changed"] == ["examples/mnist/helpers.py", "examples/mnist/train.py"]
        assert job["summary"] == ("no spec field changed; the code folder it uploads changed (2 files: "
                                  "examples/mnist/helpers.py, examples/mnist/train.py)")
    assert planned(repo) == (["mnist-lightning", "single-node"], [])
    # ignored files are not what the job uploads from a clean checkout
    (repo / ".gitignore").write_text("*.log\n")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-q", "-m", "ignore logs", cwd=repo)
    git("checkout", "-q", "--", "examples", cwd=repo)
    os.remove(repo / "examples" / "mnist" / "helpers.py")
    (repo / "examples" / "mnist" / "run.log").write_text("noise\n")
    assert planned(repo) == ([], [])


def test_a_committed_output_edited_by_hand_is_listed_with_why(repo):
    job = repo / "build" / "single-node" / "azureml" / "job.yml"
    edit(job, "instance_count: 1", "instance_count: 4")
    jobs = diffed(repo)
    assert list(jobs) == ["single-node"]
    assert jobs["single-node"]["outputs_edited"] == ["build/single-node/azureml/job.yml"]
    assert "committed outputs differ from what the spec compiles to" in jobs["single-node"]["summary"]
    assert planned(repo) == (["single-node"], [])
    # recompiling puts the compiled bytes back: nothing left to review
    ts("compile", "specs/", "-o", "build/", cwd=repo, check=True)
    assert planned(repo) == ([], [])


def test_a_base_edit_that_only_touches_comments_changes_no_job(repo):
    (repo / "bases").mkdir()
    (repo / "bases" / "gpu.yaml").write_text("version: 1\nresources:\n  nodes: 2\n  sku: Standard_ND96isr_H100_v5\n")
    (repo / "specs" / "job-a.yaml").write_text(
        "extends: ../bases/gpu.yaml\nname: job-a\ncode: ../examples/ddp\ncommand: python train.py\n"
        "framework: pytorch\nenvironment:\n  image: mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04\n")
    commit(repo, "a job on a base")
    edit(repo / "bases" / "gpu.yaml", "version: 1\n", "# shared by every H100 job\nversion: 1\n")
    assert planned(repo) == ([], [])
    edit(repo / "bases" / "gpu.yaml", "nodes: 2", "nodes: 4")
    jobs = diffed(repo)
    assert list(jobs) == ["job-a"]
    assert jobs["job-a"]["changes"][0] == {"field": "resources.nodes", "before": 2, "after": 4,
                                           "in": "in bases/gpu.yaml"}


# --- the base revision as it is -------------------------------------------------------------------

def test_links_that_leave_the_tree_at_the_base_revision_are_left_out_not_followed(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text("version: 1\nname: outside\n")
    os.symlink("/usr/share/zoneinfo/UTC", repo / "tz")
    os.symlink(str(outside), repo / "specs" / "elsewhere")
    os.symlink("../../..", repo / "examples" / "up")
    os.symlink("mnist", repo / "examples" / "same-tree")  # inside: kept
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "links", cwd=repo)
    edit(repo / "specs" / "single-node.yaml", "  nodes: 1\n", "  nodes: 2\n")
    for command in (["diff", "--git", "HEAD"], ["plan", "--git", "HEAD"]):
        proc = ts(*command, cwd=repo)
        assert proc.returncode == 0, (command, proc.stderr)
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        assert "outside" not in proc.stdout
    assert planned(repo) == (["single-node"], [])


def test_a_base_revision_without_files_reviews_every_job_as_new(tmp_path):
    """A repository whose first commit is empty (`git commit --allow-empty`, as many start): git
    archive of that tree is no tar at all; every job is new, in plan and diff --git."""
    root = tmp_path / "repo"
    root.mkdir()
    git("init", "-q", "-b", "main", cwd=root)
    git("commit", "-q", "--allow-empty", "-m", "empty", cwd=root)
    git("tag", "empty", cwd=root)
    shutil.copytree(spec_repo(tmp_path / "src"), root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs", cwd=root)
    jobs = diffed(root, "empty")
    assert jobs and {j["status"] for j in jobs.values()} == {"new"}, jobs
    names, removed = planned(root, "empty")
    assert sorted(names) == sorted(jobs) and removed == []


def _tree(root):
    """Every path under ``root``, by name: its kind, mode, bytes or link target (links not followed)."""
    import stat
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("folder", oct(stat.S_IMODE(info.st_mode)))
            else:
                with open(path, "rb") as f:
                    found[rel] = ("file", oct(stat.S_IMODE(info.st_mode)), f.read())
    return found


def _extracted(archives, into, monkeypatch, by_tar):
    """``archives`` extracted one after the other into a new folder ``into``, by GNU tar where
    _extract may use it, or by tarfile and the data filter alone (as before issue 40: no tar on PATH)."""
    import tarfile
    from trainspec.review import revision

    into.mkdir()
    with monkeypatch.context() as patch:
        if by_tar:  # tarfile writes no regular file, links are its only work
            patch.setattr(tarfile.TarFile, "makefile", lambda *a: pytest.fail("a file written through tarfile"))
        else:
            patch.setattr(revision.shutil, "which", lambda name: None)
        for archive in archives:
            revision._extract(archive, into)
    return _tree(into)


def test_the_base_revision_is_extracted_by_tar_exactly_as_tarfile_and_its_data_filter_did(tmp_path, monkeypatch):
    """GNU tar writes the base revision's files (tarfile took a minute for 50,000), and the tree is
    what tarfile and its data filter made: the same names, kinds, bytes, modes and links; a link
    that leaves the tree (absolute, `..`, a chain) is still left out, a file named like an option
    is a file; an archive git never writes (a setuid file, a name not normalized, a file below a link
    an earlier archive made) is extracted by tarfile alone, as before."""
    import io
    import subprocess
    import tarfile

    from trainspec.review import revision

    root = tmp_path / "repo"
    (root / "src" / "deep" / "er").mkdir(parents=True)
    files = {"src/train.py": b"print(1)\n", "src/deep/er/x.bin": bytes(range(256)) * 9, "-x": b"dash",
             "--foo": b"option", "with space/and\nnewline": b"nl", "ünïcode/日本語.txt": "ü".encode(),
             "long/" + "é" * 80 + "/" + "n" * 120: b"pax", "empty": b""}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    os.chmod(root / "src" / "train.py", 0o755)
    os.chmod(root / "--foo", 0o750)
    for link, target in {"inside": "src/train.py", "src/up": "../src/deep", "abs": "/etc/passwd",
                         "leaves": "../outside", "src/deep/far": "../../..", "src/deep/hop": "..",
                         "src/deep/hop2": "hop/../..", "dangling": "nowhere/y", "-l": "--foo"}.items():
        os.symlink(target, root / link)
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "tree", cwd=root)
    archive = subprocess.run(["git", "-c", "tar.umask=0022", "archive", "--format=tar", "HEAD"],
                             cwd=root, check=True, capture_output=True).stdout  # as Sparse.extract asks
    # what git never writes: a setuid or group-writable file, a name not normalized
    made = io.BytesIO()
    with tarfile.open(fileobj=made, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode in {"suid": 0o4755, "group": 0o664, "./dot": 0o644}.items():
            info = tarfile.TarInfo(name)
            info.mode, info.size = mode, 4
            tar.addfile(info, io.BytesIO(b"data"))
    # an earlier archive made the link d -> sub: a file below d is written through it
    first, second = io.BytesIO(), io.BytesIO()
    with tarfile.open(fileobj=first, mode="w") as tar:
        for name, kind in (("sub", tarfile.DIRTYPE), ("d", tarfile.SYMTYPE)):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, "sub" if kind == tarfile.SYMTYPE else "", 0o755
            tar.addfile(info)
    with tarfile.open(fileobj=second, mode="w") as tar:
        info = tarfile.TarInfo("d/x")
        info.size, info.mode = 1, 0o644
        tar.addfile(info, io.BytesIO(b"x"))
    new = _extracted([archive], tmp_path / "new", monkeypatch, by_tar=True)
    assert new == _extracted([archive], tmp_path / "old", monkeypatch, by_tar=False)
    assert new["src/train.py"] == ("file", "0o755", b"print(1)\n") and new["--foo"][:2] == ("file", "0o755")
    assert new["-x"] == ("file", "0o644", b"dash") and new["with space/and\nnewline"][2] == b"nl"
    assert {k: new[k] for k in ("inside", "src/up", "-l", "dangling", "src/deep/hop")} == {
        "inside": ("link", "src/train.py"), "src/up": ("link", "../src/deep"), "-l": ("link", "--foo"),
        "dangling": ("link", "nowhere/y"), "src/deep/hop": ("link", "..")}
    assert not {"abs", "leaves", "src/deep/far", "src/deep/hop2"} & set(new)  # hop2: a chain through hop, out
    for case, archives in {"git never": [made.getvalue()], "below a link": [first.getvalue(), second.getvalue()]}.items():
        old = _extracted(archives, tmp_path / f"old {case}", monkeypatch, by_tar=False)
        into = tmp_path / f"new {case}"
        into.mkdir()
        for one in archives:
            revision._extract(one, into)
        assert _tree(into) == old, case


K8S_SPEC = """version: 1
name: {name}
code: ../code
command: python train.py
resources: {{nodes: 1, gpus_per_node: 1}}
environment: {{image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime}}
targets: {{kubernetes: {{}}}}
"""


def test_a_code_folder_is_the_bases_only_where_git_says_so(tmp_path):
    """The base revision's tree leaves out a folder git says is the same in the working tree
    (review/revision.py Sparse), and the base side is the working tree's job only when every
    input is the same: a code file changed and not committed, an ignored file added, a change
    committed since the base each reach the ConfigMap the job embeds its code in, at the base too."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print('train')\n")
    for name in ("alpha", "beta"):
        (root / "specs" / f"{name}.yaml").write_text(K8S_SPEC.format(name=name))
    (root / ".gitignore").write_text("*.log\n")
    git("init", "-q", "-b", "main", cwd=root)
    commit(root, "specs")
    assert diffed(root, "main") == {}  # nothing changed: every base job is the working tree's

    def configmaps(jobs):
        return {name: [f["path"] for f in job["files"]] for name, job in jobs.items()}

    edit(root / "code" / "train.py", "train", "tuned")  # modified, not committed
    changed = configmaps(diffed(root, "main"))
    assert set(changed) == {"alpha", "beta"} and all(changed.values()), changed
    git("checkout", "-q", "--", "code/train.py", cwd=root)
    (root / "code" / "run.log").write_text("ignored, yet shipped\n")  # ignored by git, embedded by the job
    assert set(configmaps(diffed(root, "main"))) == {"alpha", "beta"}
    (root / "code" / "run.log").unlink()
    git("checkout", "-q", "-b", "change", cwd=root)
    edit(root / "code" / "train.py", "train", "tuned")
    commit(root, "tuned")  # the working tree is HEAD's, and HEAD's code folder is not main's
    assert set(configmaps(diffed(root, "main"))) == {"alpha", "beta"}
    assert diffed(root, "change") == {}
