"""Hostile spec file names (a pull request names its files): nothing in a spec's path becomes code
or structure in an output.

Every output names its spec (the header comment, Azure ML's tags, TRAINSPEC_SPEC). A path with a
line break (C0/C1 controls, DEL, NEL, U+2028/U+2029), a byte that is not UTF-8 or a Unicode
noncharacter is a located error for the file, and nothing is written; any other path is compiled
for every target, and each output must still parse as intended: the same documents, lines,
elements and `#SBATCH` options as the same spec under a plain name (only the path differs, as a
value), accepted by the platform's own reader (`bash -n`, azure-ai-ml's `load_job`, the HPC Pack
XSD, the strict Kubernetes CRDs, Ray's config validation), with the header read back as the spec's
path, so `check` recognises the outputs as the spec's own.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

import kube_schema
from conftest import REPO, ray_validate, trainspec_cmd
from trainspec.compiler import emit
from trainspec.review.outputs import folder_header, read_header

TARGETS = ["azureml", "hpcpack", "kubernetes", "ray", "slurm"]
XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
SPEC = """version: 1
name: hostile-name
code: {code}
command: python train.py --steps 3
resources: {{nodes: 2, sku: Standard_ND96isr_H100_v5}}
environment: {{image: pytorch/pytorch:latest, pip: [numpy==2.1.0]}}
targets:
  azureml: {{compute: gpu-cluster}}
  hpcpack: {{shared_dir: /shared/jobs, python: python3}}
  kubernetes: {{namespace: ml}}
  ray: {{location: eastus, resource_group: rg-hostile}}
  slurm: {{python: python3, partition: hpc}}
"""

# names (below specs/, without .yaml) that compile: each output must be the plain one's
ACCEPTED = {
    "dollar": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "quotes": "it's \"quoted\" \\n",
    "leading-quote": '"x',
    "xml-dashes": "a--b",
    "xml-end": "x-->y<!--z--->",
    "trailing-dash": "x-",
    "sbatch-text": "#SBATCH --nodes=1 --gpus=0",
    "header-mimic": "x (spec sha256:0000000000000000) y",
    "bidi": "invoice\u202egnp.yaml\u202c",
    "zero-width": "a\u200bb\u2060c\ufeff",
    "unicode-spaces": "a\u00a0b\u3000c",
    "tag-characters": "x\U000e0041\U000e007f",
    "letters": "modèle-日本語-🚀",
    "long": "n" * 250,
    # 14 folders of 80 zero-width characters: 6,720 characters of escapes in the header, past the
    # 2,048 bytes the header reader used to look at
    "deep": "/".join(["\u200b" * 80] * 14) + "/x",
}

# names that are an error (the character, as the message names it)
REFUSED = {
    "newline-command": ("x\ntouch PWNED\n#", "a line break (U+000A)"),
    "newline-services": ("x\nservices: {s: {type: jupyter_lab}}\n#", "a line break (U+000A)"),
    "newline-sbatch": ("x\n#SBATCH --nodes=1", "a line break (U+000A)"),
    "carriage-return": ("x\rtouch PWNED", "a line break (U+000D)"),
    "next-line": ("x\x85touch PWNED", "a line break (U+0085)"),
    "line-separator": ("x\u2028touch PWNED", "a line break (U+2028)"),
    "paragraph-separator": ("x\u2029touch PWNED", "a line break (U+2029)"),
    "escape": ("x\x1b[2Jy", "a control character (U+001B)"),
    "delete": ("x\x7fy", "a control character (U+007F)"),
    "tab": ("x\ty", "a control character (U+0009)"),
    "noncharacter": ("x\uffffy", "a Unicode noncharacter (U+FFFF)"),
    "folder": ("x\ny/ok", "a line break (U+000A)"),
    "not-utf8": ("x\udcffy", "a byte that is not UTF-8 (0xff)"),
}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line, with a strict stdout (as Python has under a locale like en_US.UTF-8): a
    name it cannot encode must not crash it."""
    return subprocess.run([*trainspec_cmd(), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, errors="backslashreplace",
                          env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})


def _write_spec(repo: Path, name: str, job: str = "hostile-name") -> str:
    """specs/<name>.yaml, its code the repository's code/ (relative: a spec reads only inside its
    repository), whatever folders the name has."""
    relative = f"specs/{name}.yaml"
    path = os.fsencode(repo / relative)  # a name with undecodable bytes, too
    os.makedirs(os.path.dirname(path), exist_ok=True)
    code = "../" * relative.count("/") + "code"
    with open(path, "w") as fh:
        fh.write(SPEC.format(code=code).replace("name: hostile-name", f"name: {job}"))
    return relative


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git repository with the plain spec and every hostile one, each compiled to its own out-<case>
    beside the outputs of another spec (job `other`)."""
    root = tmp_path_factory.mktemp("names")
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", root / "code")
    other = _write_spec(root, "other", job="other")
    for case, name in {"plain": "plain", **ACCEPTED}.items():
        spec = _write_spec(root, name)
        for compiled in (spec, other):
            proc = _run("compile", compiled, "-o", f"out-{case}", cwd=root)
            assert proc.returncode == 0, (case, proc.stderr[-3000:])
    return root


def _outputs(repo: Path, case: str, target: str) -> Path:
    return repo / f"out-{case}" / "hostile-name" / target


# the hostile spec's path and digest (a spec in a deeper folder names its code with more `../`),
# and the plain spec's: what may differ between their outputs
Marks = Dict[str, str]


def _as_plain(value: Any, marks: Marks) -> Any:
    """Data with the hostile spec's path and digest, as values, replaced by the plain one's."""
    if isinstance(value, str):
        return marks.get(value, value)
    if isinstance(value, dict):
        return {k: _as_plain(v, marks) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_plain(v, marks) for v in value]
    return value


def _xml_tree(element, marks: Marks):
    return (element.tag, _as_plain(dict(element.attrib), marks), _as_plain((element.text or "").strip(), marks),
            [_xml_tree(child, marks) for child in element if isinstance(child.tag, str)])


def _marks(display: str, hostile_digest: str, plain_digest: str) -> Marks:
    return {display: "specs/plain.yaml", hostile_digest: plain_digest}


def _same_lines(hostile: str, plain: str, marks: Marks) -> None:
    """Line for line the plain file, where a line may differ only by the path (as the header
    writes it, or as a shell word) and the digest."""
    h_lines, p_lines = hostile.split("\n"), plain.split("\n")
    assert len(h_lines) == len(p_lines), (len(h_lines), len(p_lines))
    (display, plain_display), (digest, plain_digest) = marks.items()
    for h, p in zip(h_lines, p_lines):
        h = h.replace(digest, plain_digest)
        assert h == p or any(mark in h and h.replace(mark, plain_display) == p
                             for mark in (shlex.quote(display), emit.header_path(display))), (h, p)


def _equivalent(hostile: Path, plain: Path, marks: Marks) -> None:
    name = hostile.name
    if name.endswith((".yml", ".yaml")):
        # PyYAML: a YAML 1.1 reader, as azure-ai-ml and Ray read these files
        h_docs = list(yaml.safe_load_all(hostile.read_text(encoding="utf-8")))
        assert _as_plain(h_docs, marks) == list(yaml.safe_load_all(plain.read_text(encoding="utf-8")))
        # and the comments are the plain ones but for the path
        comments = [[line for line in path.read_text(encoding="utf-8").split("\n") if line.startswith("#")]
                    for path in (hostile, plain)]
        _same_lines("\n".join(comments[0]), "\n".join(comments[1]), marks)
    elif name.endswith(".json"):
        assert _as_plain(json.loads(hostile.read_bytes()), marks) == json.loads(plain.read_bytes())
    elif name.endswith(".xml"):
        from lxml import etree

        h_doc, p_doc = etree.parse(str(hostile)), etree.parse(str(plain))
        assert _xml_tree(h_doc.getroot(), marks) == _xml_tree(p_doc.getroot(), marks)
        h_comments = [c.text for c in h_doc.getroot().itersiblings(preceding=True)]
        p_comments = [c.text for c in p_doc.getroot().itersiblings(preceding=True)]
        assert len(h_comments) == len(p_comments) == 1
        (display, plain_display), (digest, plain_digest) = marks.items()
        assert h_comments[0].replace(emit.header_path(display), plain_display).replace(digest, plain_digest) \
            == p_comments[0]
    else:
        _same_lines(hostile.read_text(encoding="utf-8"), plain.read_text(encoding="utf-8"), marks)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_a_hostile_name_changes_no_output_but_the_path(repo, case, target):
    display = f"specs/{ACCEPTED[case]}.yaml"
    hostile, plain = _outputs(repo, case, target), _outputs(repo, "plain", target)
    files = sorted(p.relative_to(hostile).as_posix() for p in hostile.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(plain).as_posix() for p in plain.rglob("*") if p.is_file())
    marks = _marks(display, folder_header(hostile).digest, folder_header(plain).digest)
    for file in files:
        _equivalent(hostile / file, plain / file, marks)
        header = read_header(hostile / file)
        if not file.startswith("trainspec_"):  # the runtime files are copied as they are
            assert header is not None and header.spec == display, (file, header)
            # nothing invisible in it: a bidi override or a zero-width space shows as an escape
            line = next(l for l in (hostile / file).read_text(encoding="utf-8").splitlines() if "Generated by" in l)
            assert line.isprintable(), ascii(line)
    # the platform's own readers
    for script in ("job.sbatch", "stage.sh", "launch.sh"):
        if (hostile / script).exists():
            proc = subprocess.run(["bash", "-n", str(hostile / script)], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
    if target == "slurm":
        _sbatch_options_come_first(hostile / "job.sbatch", ["--nodes=2", "--partition=hpc"])
    elif target == "azureml":
        from azure.ai.ml import load_job

        job = load_job(hostile / "job.yml")
        assert job.tags["trainspec_spec"] == display
        assert not getattr(job, "services", None)
    elif target == "hpcpack":
        from lxml import etree

        assert XSD.exists(), f"the HPC Pack XSD is in the shared reference: {XSD}"
        etree.XMLSchema(etree.parse(str(XSD))).assertValid(etree.parse(str(hostile / "job.xml")))
    elif target == "kubernetes":
        assert kube_schema.validate_stream((hostile / "job.yaml").read_text(encoding="utf-8")) == []
    elif target == "ray":
        ray_validate(yaml.safe_load((hostile / "cluster.yaml").read_text(encoding="utf-8")))


def _sbatch_options_come_first(script: Path, expected: List[str]) -> None:
    """Slurm reads #SBATCH lines only before the first command: all of them must come before it,
    and the spec's nodes and partition must be among them."""
    lines = script.read_text(encoding="utf-8").splitlines()
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    options = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert options and max(options) < first_command
    written = [lines[i].split(None, 1)[1] for i in options]
    for option in expected:
        assert option in written, written
    assert sum(o.startswith("--nodes=") for o in written) == 1


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_check_recognises_the_outputs_of_a_hostile_name(repo, case):
    """check of the spec itself, and of the other spec beside it: the hostile spec's outputs are its
    own (not foreign, not moved) and not orphaned (their header names a spec that exists), so
    `compile --prune` of another spec leaves them."""
    for spec in (f"specs/{ACCEPTED[case]}.yaml", "specs/other.yaml"):
        proc = _run("check", spec, "-o", f"out-{case}", cwd=repo)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0, said
        assert "match their specs" in said
        assert not any(word in said for word in ("foreign", "moved", "orphaned")), said


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_path_with_a_line_break_or_control_character_is_a_located_error(tmp_path, case):
    name, what = REFUSED[case]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    spec = _write_spec(tmp_path, name)
    # named, and found in a folder
    for command in (["compile", spec, "-o", "out"], ["compile", "specs", "-o", "out"], ["validate", spec],
                    ["check", "specs", "-o", "out"]):
        proc = _run(*command, cwd=tmp_path)
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
        assert len(errors) == 1, proc.stderr
        assert errors[0].endswith(f".yaml:1:1: error: the spec's path holds {what}, which its job files would have "
                                  "to write into comments and strings (hint: rename the file (and its folders) "
                                  "to printable characters)"), errors[0]
        assert not any(c in errors[0] for c in "\r\x85\u2028\u2029\x1b\x7f")  # escaped, one line
        assert "touch PWNED" not in proc.stdout
        assert not (tmp_path / "out").exists()
    proc = _run("validate", "--format", "github", spec, cwd=tmp_path)  # the CI annotation: one line, no crash
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    annotations = proc.stdout.rstrip("\n").split("\n")  # the runner reads workflow commands per \n
    assert "\r" not in proc.stdout
    assert len(annotations) == 1 and annotations[0].startswith("::error file=specs/"), proc.stdout
    assert "the spec's path holds" in annotations[0]


def test_a_hostile_name_in_the_review_and_ci_outputs_stays_one_line(tmp_path):
    """plan (markdown) and validate (GitHub workflow commands) name the spec file: a line break in
    its path cannot start a line of its own (`::error::`, a heading, an HTML comment)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    spec = _write_spec(tmp_path, "x\n::error file=a::pwned\n<!--\n# heading")
    for command in (["validate", "--format", "github", "specs"], ["plan", "--format", "markdown", "specs"],
                    ["plan", "specs"], ["check", "specs", "-o", "out"]):
        proc = _run(*command, cwd=tmp_path)
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        for line in (proc.stdout + proc.stderr).splitlines():
            assert not line.lstrip().startswith(("::error file=a", "<!--", "# heading")), (command, line)
        assert "pwned" in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)  # shown, escaped


def test_header_path_round_trips_and_never_holds_a_comment_end():
    for name in [*ACCEPTED.values(), "plain", "a---b", "-", "--", '"', "\\", 'a"b\\c', "\u061c\u200e"]:
        display = f"specs/{name}.yaml"
        written = emit.header_path(display)
        assert emit.spec_path(written) == display
        assert "--" not in written and written.isprintable(), written
    assert emit.header_path("specs/plain.yaml") == "specs/plain.yaml"  # outputs of earlier versions: as they were
    assert emit.spec_path("specs/plain.yaml") == "specs/plain.yaml"


@pytest.mark.parametrize("written", [b'"specs/x\\n::error::pwned\\u001b[2J.yaml"', b"specs/x\r::error::pwned\x1b[2J.yaml",
                                     b'"specs/x\\u0000.yaml"'])
def test_a_forged_header_with_a_control_character_is_no_trainspec_header(tmp_path, written):
    """A pull request can also commit an output: a header whose path holds what trainspec never
    writes (a line break or control character, raw or as a JSON escape) is not trainspec's, so
    check calls the folder foreign instead of printing that path in its report."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    spec = _write_spec(tmp_path, "ok")
    assert _run("compile", spec, "-t", "azureml", "-o", "out", cwd=tmp_path).returncode == 0
    forged = tmp_path / "out" / "forged" / "azureml"
    forged.mkdir(parents=True)
    (forged / "job.yml").write_bytes(b"# Generated by trainspec 0.1.0 for azureml from " + written
                                     + b" (spec sha256:0123456789abcdef).\ntype: command\n")
    proc = _run("check", spec, "-t", "azureml", "-o", "out", cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in said and "internal error" not in said, said
    assert "out/forged: foreign" in said, said
    assert "pwned" not in said and not any(c in said for c in "\r\x1b\x00"), said


@pytest.mark.parametrize("name", [b"x\n::error::pwned", b"x\r\x1b[2J'q", b"x\xff\xc2\x85y"])
def test_a_foreign_folder_with_a_hostile_name_is_one_line_and_its_fix_removes_it(tmp_path, name):
    """A pull request may add a folder to the output directory: check names it on one line (no
    `::error::` of its own in a CI log), and the fix it prints, run by bash, removes exactly it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    shutil.copytree(REPO / "examples" / "ddp", tmp_path / "code")
    spec = _write_spec(tmp_path, "ok")
    assert _run("compile", spec, "-t", "slurm", "-o", "out", cwd=tmp_path).returncode == 0
    os.mkdir(os.fsencode(tmp_path / "out") + b"/" + name)
    # a strict stdout, as Python has under a locale like en_US.UTF-8: a name it cannot encode is no crash
    proc = subprocess.run([*trainspec_cmd(), "check", spec, "-t", "slurm", "-o", "out"], cwd=tmp_path,
                          capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and b"foreign" in said and b"Traceback" not in said and b"internal" not in said, said
    for line in said.split(b"\n"):
        assert not line.startswith(b"::") and not any(c in line for c in b"\r\x1b"), said
    fixes = [line.strip() for line in proc.stderr.split(b"\n") if line.strip().startswith(b"rm -r -- ")]
    assert len(fixes) == 1, said
    subprocess.run(["bash", "-c", fixes[0]], cwd=tmp_path, check=True, timeout=60)
    assert os.listdir(tmp_path / "out") == ["hostile-name"]  # the spec's own folder stays
