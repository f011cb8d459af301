"""Hostile inputs through the real command line: each test checks that trainspec gives one clear
error or a correct output, never a traceback, a hang (every subprocess has a timeout), a
corrupt file, or a write outside the output directory (a listing of the test's folder is
compared before and after).

tests/test_cli.py already covers: one bad spec writes nothing, a failed write keeps the old
outputs, a file where the output directory should be, non-UTF-8, NUL bytes, a file over 1 MiB,
invalid YAML, 5000 nested `[`, an empty file, a missing file. Those are not repeated here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import REPO, trainspec_cmd, yq
from trainspec.targets.ray import lower as ray_target

CODE = REPO / "examples" / "ddp"
NS = "{http://schemas.microsoft.com/HPCS2008R2/scheduler/}"
XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
TARGETS = ["azureml", "hpcpack", "kubernetes", "ray", "slurm"]
SETTINGS = {
    "azureml": "azureml: {compute: gpu-cluster}",
    "hpcpack": "hpcpack: {shared_dir: /shared/jobs, python: python3}",
    "kubernetes": "kubernetes: {namespace: ml}",
    "ray": "ray: {location: eastus, resource_group: rg-hostile}",
    "slurm": "slurm: {python: python3}",
}


# ---------------------------------------------------------------- helpers


def ts(*args, cwd: Path, timeout: float = 300, env: Optional[Dict[str, str]] = None, prefix=()):
    """The CLI as a user runs it; every run is bounded (timeout: a hang guard, far above any run).

    ``proc.cpu`` is the CPU time (user + system) the run used: what "fails fast" means for a
    hostile input (no blow-up in the parser or the loader), and, unlike wall-clock time, the same
    on a quiet machine and on one whose cores are busy with other work."""
    import resource

    path_env = dict(os.environ if env is None else env)
    path_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path_env.get("PATH", "")])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([*prefix, *trainspec_cmd(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=path_env, stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc




def spec_text(name: str = "hostile", command: str = "python train.py", env: Optional[Dict[str, str]] = None,
              description: Optional[str] = None, code: str = str(CODE), targets: Tuple[str, ...] = ("azureml",),
              nodes: int = 2, launcher: Optional[str] = None, extra: str = "") -> str:
    lines = ["version: 1", f"name: {yq(name)}"]
    if description is not None:
        lines.append(f"description: {yq(description)}")
    lines += [f"code: {yq(code)}", f"command: {yq(command)}",
              f"resources: {{nodes: {nodes}, sku: Standard_ND96isr_H100_v5}}"]
    if launcher:
        lines.append(f"distribution: {{launcher: {launcher}}}")
    lines.append("environment: {image: pytorch:latest}")
    if env:
        lines.append("env: {" + ", ".join(f"{yq(k)}: {yq(v)}" for k, v in env.items()) + "}")
    if extra:
        lines.append(extra.rstrip("\n"))
    lines.append("targets:")
    lines += [f"  {SETTINGS[t]}" for t in targets]
    return "\n".join(lines) + "\n"


def snapshot(root: Path) -> Dict[str, Tuple]:
    """Every entry below root: kind, and content hash / link target, to see what a run changed."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def changed(before: Dict[str, Tuple], after: Dict[str, Tuple]) -> List[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def assert_only_under(before, after, *allowed: str) -> None:
    """Nothing changed in the test's folder except below the allowed (relative) directories (and the
    creation of their parent directories)."""
    def ok(p: str) -> bool:
        return any(p == a or p.startswith(a.rstrip("/") + "/")
                   or (a.startswith(p + "/") and after.get(p) == ("dir",) and p not in before) for a in allowed)
    outside = [p for p in changed(before, after) if not ok(p)]
    assert outside == [], f"changed outside {allowed}: {outside}"


def assert_clean_error(proc, *, fragment: Optional[str] = None) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    if fragment is not None:
        assert fragment in proc.stderr, proc.stderr[-3000:]


def printer(tmp: Path) -> Path:
    """An executable that prints its argv as JSON (stands in for an interpreter, or for `ray`)."""
    path = tmp / "printer"
    path.write_text(f"#!{sys.executable}\nimport json, sys\nsys.stdout.write(json.dumps(sys.argv[1:]))\n")
    path.chmod(0o755)
    return path


def bash_argv(line: str, functions: List[str], tmp: Path, env: Optional[Dict[str, str]] = None) -> List[List[str]]:
    """Run a shell line as a node agent does; every call of a function in ``functions`` is recorded."""
    log = tmp / "calls.jsonl"
    log.unlink(missing_ok=True)
    record = (f"{sys.executable} -c 'import json,sys; open(sys.argv[1], \"a\").write(json.dumps(sys.argv[2:])"
              f" + chr(10))' {shlex.quote(str(log))}")
    defs = "".join(f'{name}() {{ {record} "$@"; }}\n' for name in functions)
    proc = subprocess.run(["bash", "-c", defs + line], capture_output=True, text=True, timeout=300,
                          env={"PATH": os.environ["PATH"], "HOME": "/home/u", **(env or {})},
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (line[:2000], proc.stderr[-2000:])
    return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []


def azureml_body(job: Path) -> dict:
    azure_ml = pytest.importorskip("azure.ai.ml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return azure_ml.load_job(job)._to_job()._to_rest_object().as_dict()["properties"]


def hpcpack_tasks(job: Path):
    lxml = pytest.importorskip("lxml.etree")
    try:
        doc = lxml.parse(str(job))
    except lxml.XMLSyntaxError as exc:
        raise AssertionError(f"compile wrote a corrupt {job.name}: {exc}") from None
    if XSD.exists():
        lxml.XMLSchema(lxml.parse(str(XSD))).assertValid(doc)
    tasks = []
    for task in doc.getroot().iter(f"{NS}Task"):
        values = {v.findtext(f"{NS}Name"): v.findtext(f"{NS}Value") or ""
                  for v in task.iter(f"{NS}Variable")}
        tasks.append((task, values))
    return tasks


def ray_request(folder: Path, tmp: Path) -> Tuple[Dict[str, str], str]:
    """Run launch.sh with a fake `ray`; returns the env of the job request and the command each
    actor runs (what the driver reads from the request `ray exec` names)."""
    fake = tmp / "fakebin"
    fake.mkdir(exist_ok=True)
    log = tmp / "ray-calls.jsonl"
    (fake / "ray").write_text(f"#!{sys.executable}\nimport json, sys\n"
                              f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    (fake / "ray").chmod(0o755)
    proc = subprocess.run(["bash", str(folder / "launch.sh")], capture_output=True, text=True, timeout=300,
                          env={"PATH": f"{fake}:{os.environ['PATH']}", "HOME": "/home/u"})
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(l) for l in log.read_text().splitlines()]
    exec_line = next(c for c in calls if c[0] == "exec")[2]
    argv = bash_argv(exec_line, ["python"], tmp)[0]
    assert argv[:1] == [f"trainspec/{ray_target.DRIVER_FILE}"], argv
    request = json.loads((folder / Path(argv[1]).name).read_text())
    return request["env"], request["command"]


def kube_job(folder: Path) -> Tuple[List[dict], Dict[str, str], List[str]]:
    """job.yaml as kubectl reads it (PyYAML) and checked as the API server would (the pinned CRDs,
    tests/kube_schema.py); returns its documents, the container's env, and the argv the
    container's `bash -c` line gives the shim's interpreter (the code folder's `cd` left out: it is
    a path in the pod)."""
    import yaml

    import kube_schema

    text = (folder / "job.yaml").read_text(encoding="utf-8")
    assert kube_schema.validate_stream(text) == []
    docs = list(yaml.safe_load_all(text))
    container = docs[-1]["spec"]["trainer"]
    env = {e["name"]: e["value"] for e in container["env"]}
    bash, dash_c, line = container["command"]
    start = " && cd /trainspec/work && exec "  # after the copy of the ConfigMap's code it starts in
    assert (bash, dash_c) == ("bash", "-c") and start in line, line
    line = line.split(start, 1)[1]
    argv = bash_argv(line, ["python3"], folder)[0]
    assert argv == shlex.split(line)[1:], "bash and shlex read the line differently"
    return docs, env, argv


def slurm_run(folder: Path, tmp: Path) -> Tuple[Dict[str, str], List[str]]:
    """Run job.sbatch with bash and an `srun` that records what it got; returns the environment the
    tasks would get and srun's argv (what `bash -n` checks, run for real up to srun)."""
    fake = tmp / "fakebin"
    fake.mkdir(exist_ok=True)
    log = tmp / "srun-calls.jsonl"
    (fake / "srun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                               f"open({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], dict(os.environ)]) + '\\n')\n")
    (fake / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    for stub in ("srun", "scontrol"):
        (fake / stub).chmod(0o755)
    assert subprocess.run(["bash", "-n", str(folder / "job.sbatch")]).returncode == 0
    proc = subprocess.run(["bash", str(folder / "job.sbatch")], capture_output=True, text=True, timeout=300,
                          env={"PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
                               "SLURM_SUBMIT_DIR": str(folder)})
    assert proc.returncode == 0, proc.stderr
    [(argv, env)] = [json.loads(line) for line in log.read_text().splitlines()]
    return env, argv


# ---------------------------------------------------------------- strings: XML, YAML, shell, unicode, controls

HOSTILE = {
    "metacharacters": [
        '<tag attr="v">&amp;</tag>', "]]><!-- -->", "'; DROP TABLE x; --", "$(touch pwned) `id` ${HOME} $HOME",
        "a && b || c ; d | e > f < g 2>&1", "key: value # not a comment", "- [a, {b: c}]",
        "&anchor *alias !!python/object/apply:os.system", "%TAG ! tag:x", "\"double\" 'single' \\back\\slash",
        "{braces} [brackets] (parens)", "*glob?[a-z]", "~user", "#!/bin/sh", "---", "...", "null", "yes", "0o17",
    ],
    "unicode": [
        "\u202eevil\u202c RTL override", "עברית mixed with English", "العربية", "😀👩‍👩‍👧‍👦 ZWJ family",
        "e\u0301 combining", "\u200b\u200c\u200d zero widths", "\ufeffBOM", "\u00a0nbsp\u3000ideographic",
        "𝕳𝖆𝖈𝖐", "\u2028line sep\u2029para sep", "two\nlines\u2028and a separator",
    ],
    "controls": [  # NUL-free
        "bell\x07", "esc\x1b[31mred\x1b[0m", "cr\rcarriage", "crlf\r\nline", "vt\x0bff\x0c", "del\x7f",
        "nel\x85", "two\nlines\x85nel", "\x01\x02\x03\x1f", "nonchar\ufffe",
    ],
}


@pytest.mark.parametrize("category", sorted(HOSTILE))
@pytest.mark.parametrize("target", TARGETS)
def test_hostile_strings_in_command_env_and_description(tmp_path, target, category):
    """Either one clear error naming the field (and nothing written), or outputs that parse and give back
    exactly what the spec says: env values, description, and the script's argv after bash."""
    strings = HOSTILE[category]
    env = {f"K{i}": s for i, s in enumerate(strings)}
    args = [w for s in strings for w in ("--a", s)]
    command = shlex.join(["python", "train.py", *args])
    # the platform starts every process where it can (the command's argv is read back as it is);
    # HPC Pack and Kubernetes run the default, per node
    launcher = None if target in ("hpcpack", "kubernetes") else "per-process"
    (tmp_path / "spec.yaml").write_text(spec_text(command=command, env=env, description=" | ".join(strings),
                                                  targets=(target,), launcher=launcher), encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_only_under(before, snapshot(tmp_path), "out")
    if proc.returncode != 0:
        assert_clean_error(proc)
        named = [l for l in proc.stderr.splitlines() if re.search(r": error: (env\.K\d+|command|description): ", l)]
        assert named, f"an error, but not naming the field:\n{proc.stderr}"
        assert not (tmp_path / "out").exists()
        return
    folder = tmp_path / "out" / "hostile" / target
    wrong = []
    if target == "azureml":
        import yaml

        raw = yaml.safe_load((folder / "job.yml").read_bytes())  # PyYAML, as azure-ai-ml and the az CLI read it
        body = azureml_body(folder / "job.yml")
        for key, value in env.items():
            if raw["environment_variables"][key] != value or body["environmentVariables"][key] != value:
                wrong.append(f"env {key}={value!r} came back as {raw['environment_variables'][key]!r}")
        if body.get("description") != " | ".join(strings):
            wrong.append(f"description came back as {body.get('description')!r}")
        calls = bash_argv(body["command"].replace("${{inputs.trainspec_runtime}}", "SHIM"), ["python"], tmp_path)
        if calls != [["-I", "-S", "SHIM", "--", "python", "train.py", *args]]:
            wrong.append(f"command argv {calls!r}")
    elif target == "hpcpack":
        tasks = hpcpack_tasks(folder / "job.xml")
        assert len(tasks) == 2
        for task, values in tasks:
            for key, value in env.items():
                if values.get(key) != value:
                    wrong.append(f"env {key}={value!r} came back as {values.get(key)!r}")
            calls = bash_argv(task.get("CommandLine"), ["python3"], tmp_path, {"CCP_JOBID": "7"})
            if [c[c.index("train.py"):] for c in calls] != [["train.py", *args]]:
                wrong.append(f"command argv {calls!r}")
    elif target == "slurm":
        task_env, argv = slurm_run(folder, tmp_path)
        for key, value in env.items():
            if task_env.get(key) != value:
                wrong.append(f"env {key}={value!r} came back as {task_env.get(key)!r}")
        if argv[argv.index("--") + 1:] != ["python", "train.py", *args]:
            wrong.append(f"command argv {argv!r}")
    elif target == "kubernetes":
        _, pod_env, argv = kube_job(folder)
        for key, value in env.items():
            if pod_env.get(key) != value:
                wrong.append(f"env {key}={value!r} came back as {pod_env.get(key)!r}")
        if argv[:4] != ["-I", "-S", "/trainspec/trainspec_shim.py", "--"] \
                or argv[argv.index("--no-python") + 1:] != ["python3", "train.py", *args]:  # the image's python
            wrong.append(f"command argv {argv!r}")
    else:
        import yaml

        yaml.safe_load((folder / "cluster.yaml").read_bytes())
        pairs, actor = ray_request(folder, tmp_path)
        for key, value in env.items():
            if pairs.get(key) != value:
                wrong.append(f"env {key}={value!r} came back as {pairs.get(key)!r}")
        calls = bash_argv(actor, ["python"], tmp_path)
        if calls != [["-I", "-S", "/home/u/trainspec/trainspec_shim.py", "--", "python", "train.py", *args]]:
            wrong.append(f"command argv {calls!r}")
    assert wrong == [], "\n".join(wrong)


def test_hpcpack_control_characters_make_a_corrupt_job_xml(tmp_path):
    """Bug (minimal example of the hpcpack-controls case above): `env: {A: "esc\\x1b"}` compiles (exit 0)
    for hpcpack into a job.xml no XML parser reads (`PCDATA invalid Char value 27`): XML 1.0 has no
    way to write U+0001-U+0008, U+000B, U+000C, U+000E-U+001F, U+FFFE, U+FFFF, even as &#..;.
    And `\\r` is written raw and comes back as `\\n` (XML end-of-line handling). ElementTree does
    not check (compiler/hpcpack.py lower(): Value/CommandLine/Name texts). Expected: an error at
    env.A (and command) naming the character, or a spec-level rule; never a corrupt file."""
    (tmp_path / "spec.yaml").write_text(spec_text(env={"A": "esc\x1b"}, targets=("hpcpack",)), encoding="utf-8")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    if proc.returncode == 0:
        hpcpack_tasks(tmp_path / "out" / "hostile" / "hpcpack" / "job.xml")  # must parse
    else:
        assert_clean_error(proc, fragment="env.A")


def test_azureml_next_line_character_comes_back_as_a_space_or_newline(tmp_path):
    """Bug (minimal example of the azureml-controls case above): `env: {A: "nel\\x85"}` compiles to
    `A: 'nel\\x85  '` in job.yml: ruamel.yaml writes U+0085 (NEL) raw, as a line break, inside a
    quoted scalar (and inside a `|` block for a multi-line value, `B: "a\\nb\\x85c"`). PyYAML, which
    azure-ai-ml and the az CLI use, folds it: the job gets "nel " and "a\\nb\\nc". Where:
    compiler/emit.py _prepare(): a string holding U+0085 (like one holding \\t or \\r) must be
    written double-quoted with the character escaped (\\x85 or \\N), never literal or single-quoted."""
    import yaml

    (tmp_path / "spec.yaml").write_text(spec_text(env={"A": "nel\x85", "B": "a\nb\x85c"}), encoding="utf-8")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load((tmp_path / "out" / "hostile" / "azureml" / "job.yml").read_bytes())
    assert (job["environment_variables"]["A"], job["environment_variables"]["B"]) == ("nel\x85", "a\nb\x85c")


@pytest.mark.parametrize("command", ["cd src && python train.py", "python train.py; python evaluate.py",
                                     "python train.py\npython evaluate.py"])
@pytest.mark.parametrize("target, launcher", [("azureml", "per-process"), ("azureml", "mpi"),
                                              ("azureml", "per-node"), ("hpcpack", None),
                                              ("ray", "per-process")])
def test_a_shell_line_runs_entirely_under_the_shim_or_is_an_error(tmp_path, command, target, launcher):
    """The shim execs its arguments; a command with shell operators is written after `shim --`, so bash
    gives the shim only the first simple command and runs the rest outside it.

    Bug, minimal example: `command: cd src && python train.py` (azureml, default per-process)
    compiles to `python -I -S ${{inputs.trainspec_runtime}} -- cd src && python train.py`; on the node
    the shim execs `cd` and fails (`trainspec: error: cannot run cd`, exit 127) -- reproducible
    with `trainspec run SPEC --local`. Same for mpi, for Ray per-process, and for a two-line
    command in every launcher (per-node torchrun and HPC Pack too: a newline is not caught by
    base.torchrun_problem). Expected: an error at `command` (as per-node launch already does for
    `&&`), or the whole line under the shim (`shim -- bash -c '<command>'`)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "spec.yaml").write_text(spec_text(command=command, code=".", targets=(target,), launcher=launcher),
                                        encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_only_under(before, snapshot(tmp_path), "out")
    if proc.returncode != 0:
        assert_clean_error(proc, fragment=": error: command: ")
        return
    folder = tmp_path / "out" / "hostile" / target
    if target == "azureml":
        line = azureml_body(folder / "job.yml")["command"].replace("${{inputs.trainspec_runtime}}", "SHIM")
        shim_calls, names = ["SHIM"], ["python", "torchrun"]
        env = {"NODE_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    elif target == "hpcpack":
        line, _ = hpcpack_tasks(folder / "job.xml")[0]
        line = line.get("CommandLine")
        shim_calls, names, env = ["/shared/jobs/hostile/trainspec_shim.py"], ["python3", "python"], {"CCP_JOBID": "7"}
    else:
        line = ray_request(folder, tmp_path)[1]
        shim_calls, names, env = ["/home/u/trainspec/trainspec_shim.py"], ["python"], {}
    (tmp_path / "work" / "src").mkdir(parents=True)
    calls = bash_argv(f"cd {shlex.quote(str(tmp_path / 'work'))} && {line}", names, tmp_path, env)
    under_shim = [c for c in calls if c[:2] == ["-I", "-S"] and c[2:3] and c[2] in shim_calls]
    outside = [c for c in calls if c not in under_shim]
    assert len(under_shim) == 1 and outside == [], f"{line!r} ran {calls!r}: only the first command is under the shim"
    assert "train.py" in " ".join(under_shim[0])


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("field, spec_extra, target", [
    ("env.FOO\n", {"env": {"FOO\n": "bar"}}, "azureml"),
    ("inputs.data\n", {"inputs": "{" + yq("data\n") + ": {path: 'azureml:x@latest'}}"}, "azureml"),
    ("outputs.ckpt\n", {"outputs": "{" + yq("ckpt\n") + ": {mode: upload}}"}, "azureml"),
    ("targets.azureml.compute", {"settings": "azureml: {compute: " + yq("gpu-cluster\n") + "}"}, "azureml"),
    ("targets.azureml.experiment_name", {"settings": "azureml: {compute: gpu, experiment_name: " + yq("exp\n") + "}"},
     "azureml"),
    ("targets.hpcpack.nodes[1]", {"settings": "hpcpack: {shared_dir: /app, nodes: [N0, " + yq("N1\n") + "]}"},
     "hpcpack"),
])
def test_names_with_a_trailing_newline_are_rejected(tmp_path, field, spec_extra, target):
    """Bug: names checked with Python's re.match(r"...$") accept a trailing newline (`$` matches before a
    final "\\n"), so `env: {"FOO\\n": bar}` compiles into `? "FOO\\n"` in job.yml -- an environment
    variable, input, output, compute, experiment or HPC Pack node name that the platform rejects
    or, worse, silently differs. Where: schema/validate.py _check_names (ENV_NAME_PATTERN,
    IO_NAME_PATTERN), compiler/azureml.py _COMPUTE_NAME/_EXPERIMENT_NAME, compiler/hpcpack.py
    _NODE_NAME (pydantic's own patterns, e.g. `name`, are not affected). Use re.fullmatch or \\Z."""
    text = spec_text(targets=(target,), env=spec_extra.get("env"))
    for key in ("inputs", "outputs"):
        if key in spec_extra:
            text = text.replace("targets:\n", f"{key}: {spec_extra[key]}\ntargets:\n")
    if "settings" in spec_extra:
        text = text.replace(f"  {SETTINGS[target]}\n", f"  {spec_extra['settings']}\n")
    (tmp_path / "spec.yaml").write_text(text, encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_only_under(before, snapshot(tmp_path), "out")
    assert proc.returncode != 0, f"{field!r} with a trailing newline was accepted and compiled"
    assert_clean_error(proc)
    assert f": error: {field.rstrip(chr(10))}" in proc.stderr or f": error: {field}" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "/abs", ".hidden", "x/../../y", "x\\y", "X", "x\n",
                                  "x\u202e", "-x", "a" * 64, "", "nul\x01"])
def test_path_traversal_names_are_rejected_by_the_name_pattern(tmp_path, name):
    (tmp_path / "spec.yaml").write_text(spec_text(name=name), encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="spec.yaml:2:7: error: name: ")
    assert changed(before, snapshot(tmp_path)) == []


def test_spec_names_that_collide_case_insensitively(tmp_path):
    """Names are lower case only, so out/<name>/ cannot collide on a case-insensitive file system;
    two files whose names differ only in case, with one `name`, are a duplicate."""
    (tmp_path / "a.yaml").write_text(spec_text(name="Mnist"), encoding="utf-8")
    proc = ts("validate", "a.yaml", cwd=tmp_path)
    assert_clean_error(proc, fragment="a.yaml:2:7: error: name: is not a valid job name, got 'Mnist'")
    (tmp_path / "a.yaml").write_text(spec_text(name="mnist"), encoding="utf-8")
    (tmp_path / "A.yaml").write_text(spec_text(name="mnist"), encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "a.yaml", "A.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="is also the name of")
    assert changed(before, snapshot(tmp_path)) == []


# ---------------------------------------------------------------- sizes and shapes


@pytest.mark.parametrize("target", TARGETS)
def test_a_100_kb_env_value(tmp_path, target):
    """A clear error or a correct output, in bounded time."""
    big = ("0123456789abcdef" * 6400) + "<&>'\"$"  # 100 KiB + metacharacters at the end
    (tmp_path / "spec.yaml").write_text(spec_text(env={"BIG": big}, targets=(target,)), encoding="utf-8")
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.cpu < 20, f"took {proc.cpu:.1f} s of CPU"
    assert_only_under(before, snapshot(tmp_path), "out")
    if proc.returncode != 0:
        assert_clean_error(proc, fragment="env.BIG")
        return
    folder = tmp_path / "out" / "hostile" / target
    if target == "azureml":
        assert azureml_body(folder / "job.yml")["environmentVariables"]["BIG"] == big
    elif target == "hpcpack":
        assert all(values["BIG"] == big for _, values in hpcpack_tasks(folder / "job.xml"))
    elif target == "slurm":
        assert slurm_run(folder, tmp_path)[0]["BIG"] == big
    elif target == "kubernetes":
        assert kube_job(folder)[1]["BIG"] == big
    else:
        assert ray_request(folder, tmp_path)[0]["BIG"] == big


BOMBS = {
    "nested-maps": "a: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9, q: 10}\n"
                   + "".join(f"{n}: &{n} {{" + ", ".join(f"k{i}: *{p}" for i in range(10)) + "}\n"
                             for p, n in zip("abcdefgh", "bcdefghi")),
    "merge-keys": "a: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9, q: 10}\n"
                  + "".join(f"{n}: &{n}\n" + "".join(f"  k{i}: {{<<: *{p}}}\n" for i in range(10))
                            for p, n in zip("abcdefgh", "bcdefghi")),
    "alias-as-value-of-every-field": "version: 1\nname: &n bomb\nl0: &l0 [*n, *n, *n, *n, *n, *n, *n, *n, *n, *n]\n"
                                     + "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n"
                                               for i in range(1, 8))
                                     + "env: {A: *l7}\n",
}


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_alias_bombs_fail_fast(tmp_path, kind):
    """tests/bad_specs/billion-laughs.yaml has the list variant; maps and merge keys expand too."""
    (tmp_path / "spec.yaml").write_text(BOMBS[kind])
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="document expands to more than")
    assert proc.cpu < 10, f"took {proc.cpu:.1f} s of CPU"
    assert changed(before, snapshot(tmp_path)) == []


DEEP = {  # each under the 1 MiB limit
    "block-maps": "".join(" " * i + f"k{i}:\n" for i in range(1200)) + " " * 1200 + "x: 1\n",
    "flow-maps": "a: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n",
    "block-lists": "- " * 5000 + "1\n",
    "deep-in-a-field": "version: 1\nname: deep\nenv: {A: " + "[" * 60 + "1" + "]" * 60 + "}\n",
}


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_deeply_nested_documents_fail_fast(tmp_path, kind):
    (tmp_path / "spec.yaml").write_text(DEEP[kind])
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="error: ")
    assert "nested too deeply" in proc.stderr or "invalid YAML" in proc.stderr, proc.stderr[-2000:]
    assert proc.cpu < 20, f"took {proc.cpu:.1f} s of CPU"
    assert changed(before, snapshot(tmp_path)) == []


def test_a_50_mb_file_fails_fast_without_being_read(tmp_path, monkeypatch):
    big = tmp_path / "spec.yaml"
    with open(big, "wb") as fh:
        fh.write(b"version: 1\n")
        line = b"# " + b"x" * 1021 + b"\n"
        for _ in range(50 * 1024):
            fh.write(line)
    assert big.stat().st_size > 50 * 1024 * 1024
    small = tmp_path / "small.yaml"
    small.write_text(spec_text())
    baseline = min(ts("validate", "small.yaml", cwd=tmp_path).cpu for _ in range(2))
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="spec.yaml:1:1: error: file is larger than 1024 KiB")
    assert proc.cpu - baseline < 1.0, f"{proc.cpu:.2f} s of CPU against {baseline:.2f} s for a small spec"
    assert changed(before, snapshot(tmp_path)) == []
    # in-process: the loader reads at most its limit + 1 byte
    from trainspec.core.diagnostics import SpecError
    from trainspec.schema import loader

    read = []
    real_open = open

    def counting_open(*args, **kwargs):
        fh = real_open(*args, **kwargs)
        real_read = fh.read

        class Handle:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()

            def read(self, n=-1):
                data = real_read(n)
                read.append(len(data))
                return data

        return Handle()

    monkeypatch.setattr(loader, "open", counting_open, raising=False)
    with pytest.raises(SpecError):
        loader.load_file(str(big))
    assert sum(read) <= loader.MAX_BYTES + 1, sum(read)


BINARIES = {
    "elf": Path(sys.executable).resolve().read_bytes()[:200_000],
    "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4,
    "gzip": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + os.urandom(4096),
    "utf16-yaml": "\ufeffversion: 1\nname: x\n".encode("utf-16"),
    "latin1-yaml": "version: 1\nname: caf\u00e9\ndescription: \u00e9t\u00e9\n".encode("latin-1"),
    "random": bytes((i * 167 + 13) % 256 for i in range(65536)),
}


@pytest.mark.parametrize("kind", sorted(BINARIES) + ["dev-zero", "dev-urandom"])
def test_binary_files_get_one_clear_error(tmp_path, kind):
    spec = tmp_path / "spec.yaml"
    if kind.startswith("dev-"):
        spec.symlink_to("/dev/" + kind[4:])
    else:
        spec.write_bytes(BINARIES[kind])
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc)
    errors = [l for l in proc.stderr.splitlines() if ": error: " in l]
    assert len(errors) == 1 and errors[0].startswith("spec.yaml:"), proc.stderr[-2000:]
    if kind.startswith("dev-"):  # a device is refused from its stat, before a byte is read
        assert "is a device, not a regular file" in errors[0], errors[0]
    else:
        assert re.search(r"NUL bytes|not valid UTF-8|larger than|invalid YAML|a spec is a YAML mapping",
                         errors[0]), errors[0]
    assert proc.cpu < 10, f"took {proc.cpu:.1f} s of CPU"
    assert changed(before, snapshot(tmp_path)) == []


# ---------------------------------------------------------------- paths: code, output directory


def test_code_that_is_a_symlink_to_a_directory_works(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "train.py").write_text("print('hi')\n")
    (tmp_path / "link").symlink_to("real", target_is_directory=True)
    (tmp_path / "spec.yaml").write_text(spec_text(code="link", targets=("azureml", "hpcpack")))
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_only_under(before, snapshot(tmp_path), "out")
    job = tmp_path / "out" / "hostile" / "azureml" / "job.yml"
    azureml_body(job)  # azure-ai-ml checks that the code folder exists
    import yaml

    code = yaml.safe_load(job.read_text())["code"]
    assert (job.parent / code / "train.py").is_file()


@pytest.mark.parametrize("kind", ["dangling-symlink", "missing", "a-file", "symlink-loop"])
def test_code_that_is_not_a_directory_is_an_error_at_code(tmp_path, kind):
    if kind == "dangling-symlink":
        (tmp_path / "code").symlink_to("nowhere")
    elif kind == "a-file":
        (tmp_path / "code").write_text("not a folder")
    elif kind == "symlink-loop":
        (tmp_path / "code").symlink_to("loop2")
        (tmp_path / "loop2").symlink_to("code")
    (tmp_path / "spec.yaml").write_text(spec_text(code="code"))
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert_clean_error(proc, fragment="spec.yaml:3:7: error: code: 'code' ")
    assert changed(before, snapshot(tmp_path)) == []


@pytest.mark.parametrize("target", TARGETS)
def test_code_outside_the_spec_directory_never_makes_compile_write_outside_out(tmp_path, target):
    """`code: ../../..` is allowed (specs/ -> ../examples is the usual layout): it is a reference the
    job uploads or stages, never a place compile writes to. Every file written is under -o DIR,
    and the output's reference resolves to the same folder the spec names."""
    spec_dir = tmp_path / "a" / "b" / "c"
    spec_dir.mkdir(parents=True)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (spec_dir / "spec.yaml").write_text(spec_text(code="../../..", targets=(target,)))
    before = snapshot(tmp_path)
    out = tmp_path / "elsewhere" / "out"
    proc = ts("compile", "spec.yaml", "-o", str(out), cwd=spec_dir)
    assert proc.returncode == 0, proc.stderr
    assert_only_under(before, snapshot(tmp_path), "elsewhere/out")
    folder = out / "hostile" / target
    if target == "azureml":
        import yaml

        code = yaml.safe_load((folder / "job.yml").read_text())["code"]
        assert (folder / code).resolve() == tmp_path.resolve()
    elif target == "hpcpack":
        stage = (folder / "stage.sh").read_text()
        copied = re.search(r"^cp -R (\S+)/\. ", stage, re.M).group(1)
        assert (folder / shlex.split(copied)[0]).resolve() == tmp_path.resolve()
    elif target == "slurm":
        task_env, _ = slurm_run(folder, tmp_path)  # the script finds the code folder and starts in a copy of it
        assert Path(task_env["PWD"]) == folder / ".trainspec" / "runs" / "7"
        assert (folder / ".trainspec" / "runs" / "7" / "train.py").read_text() == "print('hi')\n"
    elif target == "kubernetes":  # the code travels in job.yaml: the ConfigMap holds the folder the spec names
        code = kube_job(folder)[0][1]
        assert code["metadata"]["name"] == "hostile-code" and code["data"]["train.py"] == "print('hi')\n"
    else:
        import yaml

        mounts = yaml.safe_load((folder / "cluster.yaml").read_text())["file_mounts"]
        assert (folder / mounts["~/trainspec/code"]).resolve() == tmp_path.resolve()


@pytest.mark.parametrize("target", TARGETS)
def test_an_output_directory_that_is_a_symlink(tmp_path, target):
    """-o out, where out -> elsewhere/deep/er: files go through the link (like any tool), the link stays a
    link, nothing else changes, and the outputs' relative references still find the code.

    Bug, minimal example: spec in specs/, `code: ../code`, `-o out` with `out -> elsewhere/deep/er`.
    job.yml says `code: ../../../code`, which is right from out/s/azureml/ as a string but the
    file lives in elsewhere/deep/er/s/azureml/, where `..` goes: azure-ai-ml's load_job fails with
    "Can't find directory or file in resolved absolute path: .../elsewhere/deep/code"; stage.sh's
    `cp -R ../../../code/.` fails the same way; Ray's file_mounts too. build.py lowers with
    `(out / name / target).absolute()`, which keeps the link; it needs `.resolve()` (the path
    the files really land in) for the relative references."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "elsewhere" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "out").symlink_to("elsewhere/deep/er", target_is_directory=True)
    (tmp_path / "specs" / "s.yaml").write_text(spec_text(name="s", code="../code", targets=(target,)))
    before = snapshot(tmp_path)
    proc = ts("compile", "specs/s.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out").is_symlink()
    assert_only_under(before, snapshot(tmp_path), "elsewhere/deep/er")
    folder = tmp_path / "out" / "s" / target
    if target == "azureml":
        import yaml

        code = yaml.safe_load((folder / "job.yml").read_text())["code"]
        assert os.path.isdir(os.path.join(folder, code)), f"code: {code} does not resolve from {folder}"
        azureml_body(folder / "job.yml")  # azure-ai-ml resolves the code folder
    elif target == "hpcpack":
        shared = tmp_path / "shared"
        run = subprocess.run(["bash", "stage.sh"], cwd=folder, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TRAINSPEC_SHARED_DIR": str(shared)})
        assert run.returncode == 0, run.stderr
        assert (shared / "s" / "code" / "train.py").is_file()
    elif target == "slurm":
        task_env, _ = slurm_run(folder, tmp_path)  # sbatch runs it from its submit directory
        assert (Path(task_env["PWD"]) / "train.py").is_file(), task_env["PWD"]
    elif target == "kubernetes":
        assert kube_job(folder)[0][1]["data"] == {"train.py": "print('hi')\n"}
    else:
        import yaml

        mounts = yaml.safe_load((folder / "cluster.yaml").read_text())["file_mounts"]
        assert os.path.isdir(os.path.join(folder, mounts["~/trainspec/code"])), mounts


def _can_mount_read_only() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind /tmp /tmp && mount -o remount,ro,bind /tmp /tmp"],
                           capture_output=True, timeout=300)
    return probe.returncode == 0


def test_a_read_only_output_directory_keeps_the_previous_outputs(tmp_path):
    (tmp_path / "spec.yaml").write_text(spec_text(targets=("azureml", "hpcpack")))
    out = tmp_path / "out"
    assert ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path).returncode == 0
    (tmp_path / "spec.yaml").write_text(spec_text(targets=("azureml", "hpcpack"), nodes=4))
    before = snapshot(tmp_path)
    if _can_mount_read_only():
        prefix = ["unshare", "-m", "sh", "-c",
                  f"mount --bind {shlex.quote(str(out))} {shlex.quote(str(out))} && "
                  f"mount -o remount,ro,bind {shlex.quote(str(out))} {shlex.quote(str(out))} && exec \"$@\"", "sh"]
    else:  # no mount namespace here: a file where the first target directory must go
        prefix = []
        shutil.rmtree(out / "hostile" / "azureml")
        (out / "hostile" / "azureml").write_text("in the way\n")
        before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path, prefix=prefix)
    assert_clean_error(proc, fragment="trainspec: error: cannot write")
    assert "existing outputs are unchanged" in proc.stderr
    assert changed(before, snapshot(tmp_path)) == [], "previous outputs changed, or debris was left"


NEWLINES = {"MULTI": "line one\nline two", "TRAILING": "value\n", "CRLF": "a\r\nb", "BLANK_LINE": "a\n\nb"}


@pytest.mark.parametrize("target", TARGETS)
def test_a_newline_in_an_env_value_is_carried_exactly(tmp_path, target):
    """The choice (README, "Environment variables"): a newline in an env value is carried exactly, not
    refused -- a PEM key or a JSON config in an env variable is a real use. Each target's reader gives
    every value back byte for byte: azure-ai-ml's load_job and PyYAML, lxml under the XSD, and the
    `--env` words Ray's launch line hands `ray job submit`."""
    (tmp_path / "spec.yaml").write_text(spec_text(env=NEWLINES, targets=(target,)), encoding="utf-8")
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "out" / "hostile" / target
    if target == "azureml":
        import yaml

        body = azureml_body(folder / "job.yml")
        raw = yaml.safe_load((folder / "job.yml").read_bytes())
        got = [{k: body["environmentVariables"][k] for k in NEWLINES}, {k: raw["environment_variables"][k] for k in NEWLINES}]
    elif target == "hpcpack":
        got = [{k: values[k] for k in NEWLINES} for _, values in hpcpack_tasks(folder / "job.xml")]
    elif target == "slurm":
        task_env = slurm_run(folder, tmp_path)[0]
        got = [{k: task_env[k] for k in NEWLINES}]
    elif target == "kubernetes":
        pod_env = kube_job(folder)[1]
        got = [{k: pod_env[k] for k in NEWLINES}]
    else:
        pairs, _ = ray_request(folder, tmp_path)
        got = [{k: pairs[k] for k in NEWLINES}]
    assert got and all(values == NEWLINES for values in got), got


# ---------------------------------------------------------------- issue 20: what outsiders found


def test_a_fifo_as_the_spec_is_an_error_not_a_hang(tmp_path):
    """Bug: `trainspec validate spec.yaml` with spec.yaml a FIFO blocked in open() until someone wrote
    to it (the subprocess timeout turns such a hang into a failure here)."""
    os.mkfifo(tmp_path / "spec.yaml")
    proc = ts("validate", "spec.yaml", cwd=tmp_path, timeout=60)
    assert_clean_error(proc, fragment="spec.yaml:1:1: error: is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("kind", ["link-to-root", "root"])
def test_a_spec_folder_that_is_the_root_is_a_usage_error(tmp_path, kind):
    """Bug: `trainspec validate root` with root -> / walked the whole file system (rglob) and ended in
    "internal error: FileNotFoundError: ... root/proc/7040" after minutes."""
    (tmp_path / "root").symlink_to("/", target_is_directory=True)
    proc = ts("validate", "root" if kind == "link-to-root" else "/", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "will not search the whole file system for specs" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_a_folder_search_does_not_follow_symlinked_folders(tmp_path):
    """A link to `/` or a loop below a searched folder is not walked: the spec beside it is found."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "s.yaml").write_text(spec_text(name="s", code=str(CODE)))
    (tmp_path / "specs" / "root").symlink_to("/", target_is_directory=True)
    (tmp_path / "specs" / "loop").symlink_to(".", target_is_directory=True)
    proc = ts("validate", "specs", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and "1 spec: 0 errors" in proc.stderr, proc.stderr


def test_a_symlink_loop_as_the_spec_is_a_located_error(tmp_path):
    """Bug: "internal error: RuntimeError: Symlink loop from ..." (Path.resolve), exit 70."""
    (tmp_path / "spec.yaml").symlink_to("other.yaml")
    (tmp_path / "other.yaml").symlink_to("spec.yaml")
    proc = ts("validate", "spec.yaml", cwd=tmp_path, timeout=60)
    assert_clean_error(proc, fragment="spec.yaml:1:1: error: is a symbolic link loop")


@pytest.mark.parametrize("field, value, where", [
    ("code", "a\0b", "code: 'a\\x00b': the path contains a NUL character"),
    ("code", "x" * 300, "code: '" + "x" * 80 + "...': the path has a part of 300 bytes"),
    ("code", "/", "code: '/' is the file-system root (/)"),
    ("environment.conda_file", "fifo", "environment.conda_file: 'fifo' is a FIFO (named pipe), not a regular file"),
    ("environment.conda_file", "a\0b", "environment.conda_file: 'a\\x00b': the path contains a NUL character"),
    ("inputs.data.path", "y" * 300, "inputs.data.path: '" + "y" * 80 + "...': the path has a part of 300 bytes"),
])
def test_hostile_paths_in_fields_are_located_errors_at_the_field(tmp_path, field, value, where):
    """Bugs: a NUL in a path field ended in "internal error: ValueError: embedded null byte", a
    300-byte name in "OSError: File name too long" (exit 70); `code: /` was accepted (the job
    would upload the machine); a FIFO as the conda file was called missing."""
    os.mkfifo(tmp_path / "fifo")
    extra = ""
    code = str(CODE)
    if field == "code":
        code = value
    elif field == "environment.conda_file":
        extra = f"environment: {{image: pytorch:latest, conda_file: {yq(value)}}}"
    else:
        extra = f"inputs: {{data: {{path: {yq(value)}}}}}"
    text = spec_text(code=code)
    if extra.startswith("environment"):
        text = text.replace("environment: {image: pytorch:latest}\n", "")
    (tmp_path / "spec.yaml").write_text(text + extra + "\n")
    proc = ts("validate", "spec.yaml", cwd=tmp_path, timeout=60)
    assert_clean_error(proc, fragment=f": error: {where}")
    line = next(l for l in proc.stderr.splitlines() if where in l)
    assert re.match(r"spec\.yaml:\d+:\d+: error: ", line), line


def test_code_above_the_repository_root_is_an_error_at_code(tmp_path):
    """`code: ../..` from repo/specs/ is the folder that holds the repository: the job would upload
    everything beside it. Inside the repository (`../code`) it is fine; outside any repository
    only `/` is refused (test_code_outside_the_spec_directory_...)."""
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "code").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    (repo / "specs" / "up.yaml").write_text(spec_text(name="up", code="../.."))
    (repo / "specs" / "in.yaml").write_text(spec_text(name="in", code="../code"))
    proc = ts("validate", "specs/up.yaml", cwd=repo, timeout=60)
    assert_clean_error(proc, fragment=f"specs/up.yaml:3:7: error: code: '../..' is {tmp_path.resolve()}, above the "
                                      f"repository root {repo.resolve()}")
    assert ts("validate", "specs/in.yaml", cwd=repo, timeout=60).returncode == 0


@pytest.mark.parametrize("link", ["name", "target", "name-inside"])
def test_compile_never_writes_through_a_link_that_leaves_out(tmp_path, link):
    """Bug: with out/hostile -> ../elsewhere, `compile -o out` wrote its files into elsewhere/. A link
    in OUT/<name> or OUT/<name>/<target> is an error naming it, and nothing is written anywhere;
    one that stays inside -o too (issue 27: a later prune or check would follow it)."""
    (tmp_path / "spec.yaml").write_text(spec_text())
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    if link == "name":
        (tmp_path / "out" / "hostile").symlink_to("../elsewhere", target_is_directory=True)
    elif link == "target":
        (tmp_path / "out" / "hostile").mkdir()
        (tmp_path / "out" / "hostile" / "azureml").symlink_to("../../elsewhere", target_is_directory=True)
    else:
        (tmp_path / "out" / "real").mkdir()
        (tmp_path / "out" / "hostile").symlink_to("real", target_is_directory=True)
    before = snapshot(tmp_path)
    proc = ts("compile", "spec.yaml", "-o", "out", cwd=tmp_path)
    if link == "name-inside":
        assert_clean_error(proc, fragment=f"cannot write out/hostile: is a symbolic link to "
                                          f"{(tmp_path / 'out' / 'real').resolve()}, inside the output folder out")
        assert changed(before, snapshot(tmp_path)) == []
        return
    where = "out/hostile" if link == "name" else "out/hostile/azureml"
    assert_clean_error(proc, fragment=f"cannot write {where}: is a symbolic link to {(tmp_path / 'elsewhere').resolve()}, "
                                      "outside the output folder out")
    assert changed(before, snapshot(tmp_path)) == []


def test_text_diagnostics_escape_control_characters(tmp_path):
    """Bug: a key written with a newline came out raw: `env: {"A\\n::error file=x::pwned": 1}` printed a
    line `::error file=x::pwned...`, which a GitHub runner reads as a workflow command (and an
    escape sequence reaches the terminal). Text diagnostics show them escaped, on one line."""
    (tmp_path / "spec.yaml").write_text(spec_text(env={"A\n::error file=x::pwned": "1", "B\x1b[2J": "2"}))
    proc = ts("validate", "spec.yaml", cwd=tmp_path, timeout=60)
    assert_clean_error(proc)
    assert not any(line.startswith("::") for line in proc.stderr.splitlines()), proc.stderr
    assert "\x1b" not in proc.stderr
    assert "error: env.A\\n::error file=x::pwned: 'A\\n::error file=x::pwned' is not a valid environment variable " \
           "name" in proc.stderr, proc.stderr
    assert "error: env.B\\x1b[2J: " in proc.stderr, proc.stderr


# --- the review's and the cache's reads: never a FIFO, never a wait -------------------------------

def test_a_fifo_among_the_outputs_or_the_cache_never_hangs_check_or_plan(tmp_path):
    """Every file the review commands read besides specs (output headers, committed outputs, the
    check cache, a spec found in a folder) goes through the same bounded, non-blocking read."""
    from conftest import edit, git, spec_repo, ts

    repo = spec_repo(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, TRAINSPEC_CACHE_DIR=str(cache))
    assert ts("check", "specs/", "--out", "build/", cwd=repo, env=env).returncode == 0  # the cache now has records
    os.mkfifo(repo / "build" / "single-node" / "azureml" / "fifo")  # a stray FIFO in an output folder
    job = repo / "build" / "mnist-lightning" / "azureml" / "job.yml"
    job.unlink()
    os.mkfifo(job)  # a committed output replaced by a FIFO
    for record in cache.rglob("*.json"):
        record.unlink()
        os.mkfifo(record)
    for command in (["check", "specs/", "--out", "build/"], ["plan", "--git", "HEAD"], ["diff", "--git", "HEAD"],
                    ["validate", "specs/"]):
        proc = ts(*command, cwd=repo, env=env)
        assert proc.returncode in (0, 1), (command, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, (command, proc.stderr)
    proc = ts("check", "specs/", "--out", "build/", cwd=repo, env=env)
    assert "build/mnist-lightning/azureml/job.yml: missing" in proc.stdout  # not a file: not what compile writes


def test_import_and_skus_import_refuse_a_fifo_in_one_line(tmp_path):
    from conftest import ts

    shutil.copytree(REPO / "tests" / "jobs", tmp_path / "jobs")
    env_file = tmp_path / "jobs" / "environments" / "nccl.yml"
    env_file.unlink()
    os.mkfifo(env_file)
    proc = ts("import", "jobs/env-file.yml", cwd=tmp_path)
    assert proc.returncode == 1 and "internal error" not in proc.stderr
    assert "cannot read the environment file ./environments/nccl.yml: is a FIFO (named pipe)" in proc.stderr
    os.mkfifo(tmp_path / "skus.json")
    proc = ts("skus", "--import", "skus.json", cwd=tmp_path)
    assert proc.returncode == 2 and "--import skus.json: is a FIFO (named pipe)" in proc.stderr


def test_an_env_variable_named_underscore_is_an_error_at_its_key(tmp_path):
    """bash sets $_ after every command (Slurm's job.sbatch, every command run through bash under
    the shim): a spec's `_` would never reach the job, so it is refused where it is written."""
    from conftest import ts

    (tmp_path / "code").mkdir()
    (tmp_path / "spec.yaml").write_text("version: 1\nname: underscore\ncode: code\ncommand: python train.py\n"
                                        "resources: {nodes: 1, gpus_per_node: 1}\nenv:\n  _: x\n")
    proc = ts("validate", str(tmp_path / "spec.yaml"))
    assert proc.returncode == 1 and "spec.yaml:7:3: error: env._: _ is the shell's own" in proc.stderr, proc.stderr
