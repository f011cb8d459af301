"""Property tests: generated specs, every target, and the shim's worlds.

- *valid* specs (nodes, SKUs, GPU and process counts, framework x launcher per target, nasty
  strings in env/command/description, inputs/outputs, per-target settings) compile in-process
  with no error, byte-identically twice, into outputs each platform's own reader accepts
  with the counts the spec implies; command lines survive XML/YAML and bash exactly;
- the shim: for random platform worlds every process gets a consistent rank, and a world that
  disagrees with the spec fails with both numbers;
- *invalid* specs (one field broken at a time) fail `trainspec validate` with that field's
  dotted path at the right file:line:col, and `trainspec compile` writes nothing.

Generated examples are derandomized (the same on every run, so CI is stable); set
TRAINSPEC_HYPOTHESIS_RANDOM=1 to explore new ones and TRAINSPEC_HYPOTHESIS_SCALE=10 for ten
times as many. Each bug found here also has a plain regression test with its minimal example.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("hypothesis", reason="hypothesis is needed for the property tests: pip install hypothesis")
from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st  # noqa: E402

import conftest
from conftest import REPO, ray_validate, trainspec_cmd, yq
from test_fuzz import run_in_process
from trainspec.registry.build import build  # noqa: E402
from trainspec.targets.ray import lower as ray_target  # noqa: E402
from trainspec.compiler.write import write_all  # noqa: E402
from trainspec.core.diagnostics import dotted  # noqa: E402
from trainspec.runtime import normalize_environment, shim  # noqa: E402
from trainspec.schema.skus import all_skus  # noqa: E402
from trainspec.schema.validate import RESERVED_ENV  # noqa: E402
from trainspec.targets.slurm.lower import SCRIPT_VARIABLES as SLURM_SCRIPT_VARIABLES  # noqa: E402
from trainspec.runtime.ray_driver import read_request  # noqa: E402

XSD = REPO.parent / "shared" / "reference" / "hpcpack" / "xsd" / "job-v4.fixed.xsd"
NS = "{http://schemas.microsoft.com/HPCS2008R2/scheduler/}"
CODE = REPO / "examples" / "ddp"
CONDA = CODE / "environment.yml"
JOB_ID = "4242"

def examples(n: int) -> int:
    return max(1, int(n * float(os.environ.get("TRAINSPEC_HYPOTHESIS_SCALE", "1"))))


COMMON = dict(
    deadline=None,
    database=None,  # no example database (derandomized runs replay themselves)
    derandomize=not os.environ.get("TRAINSPEC_HYPOTHESIS_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ================================================================ writing a spec with known positions


class Flow:
    """A value written inline on its key's line (a broken value in the invalid-spec tests)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"Flow({self.value!r})"




def flow(value: Any) -> str:
    return conftest.flow(value, lambda v: v.value if isinstance(v, Flow) else v)


Pos = Dict[Tuple, Tuple[int, int, int]]  # path -> (line, key column, value column), 1-based


def emit(data: Dict[str, Any]) -> Tuple[str, Pos]:
    """Block YAML, one key per line; every scalar double-quoted; where each key and value is."""
    lines = ["# written by tests/test_properties.py", "---"]
    pos: Pos = {}

    def walk(mapping: Dict[str, Any], path: Tuple, indent: int) -> None:
        for key, value in mapping.items():
            head = " " * indent + yq(str(key)) + ":"
            here = path + (key,)
            if isinstance(value, dict) and value:
                lines.append(head)
                pos[here] = (len(lines), indent + 1, indent + 1)
                walk(value, here, indent + 2)
            else:
                lines.append(head + " " + flow(value))
                pos[here] = (len(lines), indent + 1, len(head) + 2)

    walk(data, (), 0)
    return "\n".join(lines) + "\n", pos


# ================================================================ strategies: valid specs

GPU_SKUS = [s for s in all_skus() if s.gpus > 0]
TEMPLATE_MARKS = ("{{", "{%", "{#")

NASTY = [
    'a & b < c > d "q" $(rm -rf /) ; `x` | y', "O'Brien", "it's \"quoted\"", "\u202eRTL override\u202c",
    "שלום עולם", "مرحبا بالعالم", "😀🚀 emoji", "null", "true", "~", "- item", "key: value", "#comment",
    "*alias", "&anchor", "!tag", "%YAML 1.1", "---", "...", "<![CDATA[x]]>", "]]>", "&amp;", "&#x41;",
    "<!-- c -->", "\\", "C:\\path\\to", "  leading", "trailing  ", "", "0x1F", "1e3", "010", "2024-01-01",
    "yes", "on", "=", "<<", "a\nb", "tab\there", "$HOME", "${HOME}", "`id`", "; rm -rf / ;", "&&", "||", ";",
    "|", ">", "<", "(", ")", "*", "?", "[a]", "{}", "}", "\u00a0nbsp", "\u200bzero-width", "\ufeffbom",
]
TEXT = st.characters(exclude_categories=("Cs", "Cc", "Cn"), include_characters="\t\n")
SHELLISH = st.sampled_from(list("&<>$();'\"\\`|*?~#!{}[],:%@ =\t\n"))


def no_template(text: str) -> bool:
    return not any(mark in text for mark in TEMPLATE_MARKS)


nasty_text = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.one_of(TEXT, SHELLISH), max_size=30),
    st.builds(lambda s, n: (s * n)[:20000], st.text(st.one_of(TEXT, SHELLISH), min_size=1, max_size=8),
              st.integers(100, 3000)),
).filter(no_template)

ENV_KEY = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z").filter(
    lambda k: k not in RESERVED_ENV and k != "_" and not k.startswith(("TRAINSPEC_", "PL_TRAINER_"))
    and k not in SLURM_SCRIPT_VARIABLES)  # job.sbatch's own: an error on Slurm (test_slurm.py)
IO_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,12}\Z").filter(lambda k: k != "trainspec_runtime")
NAME = st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,20}\Z")
DNS_1035 = st.from_regex(r"\A[a-z]([-a-z0-9]{0,18}[a-z0-9])?\Z")  # a Kubernetes job's name
DNS_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?\Z")
LABEL_VALUE = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?\Z")
LABEL_KEY = st.from_regex(r"\A([a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z]{2,5})?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?\Z")
FLAG = st.from_regex(r"\A--[a-z][a-z_]{0,10}\Z").filter(lambda t: not re.search(r"num[_-]nodes|devices", t))

# with the interpreter's own flags, which per-node torchrun must keep (--no-python, as written)
INTERPRETERS = ["python", "python3", "python3.11", "python -u", "python3 -u", "python -X faulthandler -u", "python3 -B -u"]
LAUNCHERS = {
    "azureml": {"pytorch": [None, "per-process", "per-node", "mpi"], "huggingface": [None, "per-process", "per-node"],
                "lightning": [None, "per-process", "per-node", "mpi"], "deepspeed": [None, "mpi", "per-process"],
                "tensorflow": [None]},
    "hpcpack": {f: [None, "per-node"] for f in ("pytorch", "huggingface", "lightning", "deepspeed")},
    "kubernetes": {f: [None, "per-node"] for f in ("pytorch", "huggingface", "lightning", "deepspeed")},
    "ray": {f: [None, "per-process", "per-node"] for f in ("pytorch", "huggingface", "lightning", "deepspeed")},
    "slurm": {f: [None, "per-process", "per-node"] for f in ("pytorch", "huggingface", "lightning", "deepspeed")},
}


def default_launcher(framework: str, world_size: int) -> str:
    """The spec's launcher when it names none, the same on every target: one process runs alone
    (per-process), several are started by a launcher on each node (per-node); TensorFlow's one
    worker per node reads here as per-node."""
    return "per-process" if framework != "tensorflow" and world_size == 1 else "per-node"

IMAGES = ["mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04", "pytorch/pytorch:latest",
          "rayproject/ray:2.60.0-py311-gpu"]
# each image as pyxis reads it on Slurm (enroot's registry#path:tag; Docker Hub's as they are)
PYXIS = {IMAGES[0]: "mcr.microsoft.com#azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04", IMAGES[1]: IMAGES[1],
         IMAGES[2]: IMAGES[2]}


class Gen:
    """A generated valid spec: the data written, and what its compiled outputs must say."""

    def __init__(self, target: str, data: Dict[str, Any], **facts: Any):
        self.target = target
        self.data = data
        self.__dict__.update(facts)

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"Gen({self.target!r}, {json.dumps(self.data, ensure_ascii=True)}, args={self.args!r})"


def command_of(interpreter: str, args: List[Tuple[str, str]]) -> str:
    words = []
    for kind, value in args:
        if kind == "lit":
            words.append(shlex.quote(value))
        elif kind == "tpl":
            words.append("{{ %s }}" % value)
        else:
            words.append("{{ %s.%s }}" % ("inputs" if kind == "in" else "outputs", value))
    return " ".join([interpreter, "train.py", *words])


def minimal_gen(target: str, args: List[Tuple[str, str]], launcher: Optional[str] = None) -> Gen:
    """A small hand-written example (for @example: a known bug fails at once, without a search)."""
    sku = next(s for s in GPU_SKUS if s.name == "Standard_ND96isr_H100_v5")
    settings_ = {"azureml": {"compute": "gpu-cluster"}, "hpcpack": {"shared_dir": "/app"}, "kubernetes": {},
                 "ray": {"location": "eastus", "resource_group": "rg", "head": "worker"}}[target]
    data: Dict[str, Any] = {"version": 1, "name": "minimal", "code": "CODE_ABS",
                            "command": command_of("python", args), "framework": "pytorch",
                            "resources": {"nodes": 2, "sku": sku.name}}
    if launcher:
        data["distribution"] = {"launcher": launcher}
    data["environment"] = {"image": IMAGES[0]}
    data["targets"] = {target: settings_}
    numbers = {"nodes": 2, "procs_per_node": 8, "gpus_per_node": 8, "world_size": 16, "name": "minimal"}
    return Gen(target, data, framework="pytorch", launcher=launcher or default_launcher("pytorch", 16),
               nodes=2, procs=8, gpus=8, sku=sku, args=args, numbers=numbers, interpreter="python",
               python_words=["python3"], port=None, env={})


@st.composite
def valid_specs(draw, target: str) -> Gen:
    frameworks = sorted(LAUNCHERS[target])
    framework = draw(st.sampled_from(frameworks))
    launcher = draw(st.sampled_from(LAUNCHERS[target][framework]))
    nodes = draw(st.integers(1, 8))
    sku = draw(st.sampled_from(GPU_SKUS))
    gpus = draw(st.none() | st.integers(1, sku.gpus))
    resolved_gpus = sku.gpus if gpus is None else gpus
    procs = None if framework == "tensorflow" else draw(st.none() | st.integers(1, resolved_gpus))
    resolved_procs = 1 if framework == "tensorflow" else (resolved_gpus if procs is None else procs)
    resources: Dict[str, Any] = {"nodes": nodes, "sku": draw(st.sampled_from([sku.name, sku.name.lower()]))}
    if gpus is not None:
        resources["gpus_per_node"] = gpus
    if procs is not None:
        resources["procs_per_node"] = procs
    spot = draw(st.booleans()) if target in ("azureml", "ray") else False
    if spot:
        resources["spot"] = True
    if draw(st.booleans()):
        resources["shm_size"] = draw(st.sampled_from(["16g", "512m", "1g"]))

    inputs: Dict[str, Any] = {}
    outputs: Dict[str, Any] = {}
    for name in draw(st.lists(IO_NAME, max_size=2, unique=True)):
        if target == "azureml":
            path = draw(st.sampled_from(["azureml:mnist@latest", "azureml:data:3", "https://example.com/d/",
                                         "azureml://datastores/workspaceblobstore/paths/data/", "RELATIVE"]))
            mode = draw(st.sampled_from(["ro_mount", "download"]))
        elif target in ("hpcpack", "slurm"):
            path, mode = str(draw(st.sampled_from([CODE, REPO / "examples"]))), "ro_mount"
        elif target == "kubernetes":  # a path in the pod
            path, mode = draw(st.sampled_from([str(CODE), "/data/mnist", "/mnt/a b/$(id);'x'\n#: y"])), "ro_mount"
        else:
            path = draw(st.sampled_from(["https://example.com/d.csv", str(CODE), "RELATIVE"]))
            mode = "ro_mount"
        inputs[name] = {"path": path, "mode": mode}
    for name in draw(st.lists(IO_NAME, max_size=2, unique=True)):
        if name in inputs:
            continue
        if target == "azureml":
            path = draw(st.sampled_from([None, "azureml://datastores/workspaceblobstore/paths/out/"]))
        else:
            path = draw(st.sampled_from([None, "/shared/out put", "/data/ckpt"]))
        outputs[name] = {"mode": draw(st.sampled_from(["rw_mount", "upload"]))}
        if path:
            outputs[name]["path"] = path

    numbers = {"nodes": nodes, "procs_per_node": resolved_procs, "gpus_per_node": resolved_gpus,
               "world_size": nodes * resolved_procs}
    effective = launcher or default_launcher(framework, nodes * resolved_procs)
    name = draw(DNS_1035 if target == "kubernetes" else NAME)
    numbers["name"] = name
    # the command's arguments: (text in the spec, what the script must receive)
    arg_kinds = st.one_of(
        FLAG.map(lambda f: ("lit", f)),
        st.integers(-5, 10 ** 6).map(lambda n: ("lit", str(n))),
        nasty_text.filter(lambda t: not re.search(r"num[_-]nodes|devices", t)).map(lambda t: ("lit", t)),
        st.sampled_from(sorted(numbers)).map(lambda n: ("tpl", n)),
        *([st.sampled_from(sorted(inputs)).map(lambda n: ("in", n))] if inputs else []),
        *([st.sampled_from(sorted(outputs)).map(lambda n: ("out", n))] if outputs else []),
    )
    args = draw(st.lists(arg_kinds, max_size=6))
    interpreter = draw(st.sampled_from(INTERPRETERS))
    command = command_of(interpreter, args)

    env = draw(st.dictionaries(ENV_KEY, nasty_text, max_size=4))
    data: Dict[str, Any] = {"version": 1, "name": name}
    if draw(st.booleans()):
        data["description"] = draw(nasty_text)
    data["code"] = "CODE_ABS" if draw(st.booleans()) else "CODE_REL"
    data["command"] = command
    data["framework"] = framework
    data["resources"] = resources
    distribution: Dict[str, Any] = {}
    if launcher:
        distribution["launcher"] = launcher
    port = draw(st.none() | st.integers(1024, 65535))
    if port is not None:
        distribution["master_port"] = port
    if distribution:
        data["distribution"] = distribution
    environment: Dict[str, Any] = {}
    if target == "azureml" and draw(st.booleans()):
        environment["azureml"] = draw(st.sampled_from(["my-env@latest", "my-env:3", "azureml:my-env@latest"]))
    else:
        environment["image"] = draw(st.sampled_from(IMAGES))
        # a conda file only where the target creates one (Slurm, HPC Pack and Kubernetes refuse it)
        extra = draw(st.sampled_from(["none", "conda", "pip"] if target in ("azureml", "ray") else ["none", "pip"]))
        if extra == "conda":
            environment["conda_file"] = str(CONDA)
        elif extra == "pip":
            environment["pip"] = draw(st.lists(st.sampled_from(["torch==2.4.1", "numpy", "lightning>=2.4",
                                                                "transformers[torch]"]), min_size=1, max_size=3,
                                               unique=True))
    data["environment"] = environment
    if env:
        data["env"] = env
    if inputs:
        data["inputs"] = inputs
    if outputs:
        data["outputs"] = outputs

    settings_: Dict[str, Any] = {}
    python_words = None
    if target == "azureml":
        if draw(st.booleans()):
            settings_["compute"] = draw(st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,10}[A-Za-z0-9]\Z"))
        if draw(st.booleans()):
            settings_["experiment_name"] = draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,20}\Z"))
        if draw(st.booleans()):
            settings_["timeout"] = draw(st.sampled_from(["2d", "12h", "1h30m", 3600]))
        if draw(st.booleans()):
            settings_["priority"] = draw(st.sampled_from(["low", "medium", "high"]))
        tags = draw(st.dictionaries(st.from_regex(r"\A[a-z][a-z0-9_]{0,10}\Z").filter(
            lambda k: not k.startswith("trainspec_")), nasty_text, max_size=2))
        if tags:
            settings_["tags"] = tags
    elif target == "hpcpack":
        settings_["shared_dir"] = draw(st.one_of(st.just("/"), st.from_regex(
            r"\A(/[A-Za-z0-9_.-]{1,10}){1,3}/?\Z").filter(lambda p: "/../" not in p + "/" and "/./" not in p + "/")))
        if draw(st.booleans()):
            settings_["node_group"] = draw(st.sampled_from(["LinuxNodes", "GPU Nodes", "gpu-h100"]))
        if draw(st.booleans()):
            names = draw(st.lists(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,14}\Z"), min_size=nodes,
                                  max_size=nodes, unique_by=str.upper))
            settings_["nodes"] = names
        python_words = draw(st.sampled_from([["python3"], ["python"], ["PRINTER"]]))
        if python_words != ["python3"]:
            settings_["python"] = "PRINTER_QUOTED" if python_words == ["PRINTER"] else python_words[0]
        setup = draw(st.sampled_from([None, "true", ": ready", "export TS_SETUP=1"]))
        if setup:
            settings_["setup"] = setup
        if draw(st.booleans()):
            settings_["rdzv_port"] = draw(st.integers(1024, 65535))
        if draw(st.booleans()):
            settings_["runtime"] = draw(st.sampled_from(["12h", "2d", 600]))
        if draw(st.booleans()):
            settings_["priority"] = draw(st.sampled_from(["Lowest", "Normal", "Highest"]))
    elif target == "slurm":
        for field, values in (("partition", ["gpu", "hpc,debug"]), ("account", ["ml-team"]), ("qos", ["high"]),
                              ("time", ["12h", "2d", 90]), ("constraint", ["a100&ib", "ndv5|ndv4"]),
                              ("exclusive", [False]), ("requeue", [True]), ("logs", ["logs", "/shared/logs"])):
            if draw(st.booleans()):
                settings_[field] = draw(st.sampled_from(values))
        python_words = draw(st.sampled_from([["python3"], ["python"], ["python3.11"]]))
        if python_words != ["python3"]:
            settings_["python"] = python_words[0]
        setup = draw(st.sampled_from([None, "true", ": ready", "export TS_SETUP=1"]))
        if setup:
            settings_["setup"] = setup
        # an output without a path needs a place on the shared storage (it would land in the job folder)
        volumes = {name: {"path": draw(st.sampled_from(["/shared/ck pt/$x", "/runs/it's"]))}
                   for name, item in outputs.items() if "path" not in item}
        if volumes:
            settings_["volumes"] = volumes
    elif target == "kubernetes":
        settings_["api"] = draw(st.sampled_from(["trainjob", "pytorchjob"]))
        for field, values in (("namespace", DNS_LABEL), ("queue", LABEL_VALUE.filter(bool)),
                              ("runtime", DNS_LABEL), ("service_account", DNS_LABEL),
                              ("image_pull_secrets", st.lists(DNS_LABEL, max_size=2, unique=True)),
                              ("node_selector", st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2)),
                              ("tolerations", st.lists(st.one_of(
                                  st.fixed_dictionaries({"key": LABEL_KEY, "value": LABEL_VALUE},
                                                        optional={"effect": st.sampled_from(["NoSchedule",
                                                                                             "NoExecute"])}),
                                  st.fixed_dictionaries({"operator": st.just("Exists")},
                                                        optional={"key": LABEL_KEY})), max_size=2)),
                              ("rdma_resource", st.sampled_from(["rdma/ib", "rdma/shared_ib", "example.com/ib"])),
                              ("timeout", st.sampled_from(["12h", "2d", 1, 2 ** 63 - 1])),
                              ("code", st.sampled_from([{"pvc": {"claim": "code"}},
                                                        {"pvc": {"claim": "c", "sub_path": "a b/$(id)/'x'"}},
                                                        {"image": {"path": "/work space/$HOME;`id`"}}]))):
            if draw(st.booleans()):
                settings_[field] = draw(values)
        python_words = ["PRINTER"]  # the pod's interpreter: the printer, which the container's line execs
        settings_["python"] = "PRINTER_QUOTED"
        volumes = {name: {"pvc": draw(st.sampled_from([{"claim": "runs"}, {"claim": "runs", "sub_path": "a b/$x"}]))}
                   for name, item in outputs.items() if "path" not in item}  # an output on a claim, or lost
        if volumes:
            settings_["volumes"] = volumes
    else:
        settings_["location"] = draw(st.sampled_from(ray_target.AZURE_REGIONS))
        settings_["resource_group"] = draw(st.from_regex(r"\A[-A-Za-z0-9_.()]{1,30}\Z"))
        settings_["head"] = draw(st.sampled_from(["worker", "cpu"]))
        if draw(st.booleans()):
            settings_["ssh_private_key"] = "~/.ssh/id_rsa"
            settings_["ssh_public_key"] = "~/.ssh/id_rsa.pub"
        if draw(st.booleans()):
            settings_["cluster_name"] = draw(NAME)
        if draw(st.booleans()):
            settings_["python"] = "python3"
        settings_["idle_timeout_minutes"] = draw(st.integers(0, 60))
        # an output without a path needs a place that outlives the cluster (a VM `ray down` deletes)
        volumes = {name: {"path": draw(st.sampled_from(["abfss://runs@acct.dfs.core.windows.net/c%20k", "/mnt/r'uns"]))}
                   for name, item in outputs.items() if "path" not in item}
        if volumes:
            settings_["volumes"] = volumes
    data["targets"] = {target: settings_}
    return Gen(target, data, framework=framework, launcher=effective, nodes=nodes, procs=resolved_procs,
               gpus=resolved_gpus, sku=sku, args=args, numbers=numbers, interpreter=interpreter,
               python_words=python_words, port=port, env=env)


# ================================================================ helpers: write, compile, printers


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A printer that stands in for an interpreter: prints its argv as JSON."""
    base = tmp_path_factory.mktemp("props")
    bin_dir = base / "bin dir"  # a space: the interpreter path must be quoted all the way
    bin_dir.mkdir()
    printer = bin_dir / "python"
    printer.write_text(f"#!{sys.executable}\nimport json, sys\nsys.stdout.write(json.dumps(sys.argv[1:]))\n")
    printer.chmod(0o755)
    return base, printer


def materialize(gen: Gen, base: Path, printer: Path) -> Tuple[Path, str, Pos]:
    """Write the spec into a fresh folder; returns (spec file, YAML text, positions)."""
    folder = Path(tempfile.mkdtemp(dir=base))
    data = copy.deepcopy(gen.data)
    data["code"] = str(CODE) if data["code"] == "CODE_ABS" else os.path.relpath(CODE, folder)
    for item in data.get("inputs", {}).values():
        if item["path"] == "RELATIVE":
            item["path"] = os.path.relpath(CODE, folder)
    settings_ = data["targets"][gen.target]
    if settings_.get("python") == "PRINTER_QUOTED":
        settings_["python"] = shlex.quote(str(printer))
    text, pos = emit(data)
    spec = folder / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec, text, pos


def compile_in_process(spec: Path, target: str):
    out = spec.parent / "out"
    outcome = build(str(spec), out, [target])
    errors = [d.render() for d in outcome.diagnostics if d.is_error]
    return outcome, out, errors


def files_of(outcome) -> Dict[Tuple[str, str], bytes]:
    return {(a.target, f.path): f.data for a in outcome.artifacts for f in a.files}


def expected_args(gen: Gen, target: str, *, settings_: Dict[str, Any], spec_dir: Path) -> List[str]:
    """What the script must receive, computed from the generator's own facts (not the compiler's)."""
    out = []
    for kind, value in gen.args:
        if kind == "lit":
            out.append(value)
        elif kind == "tpl":
            out.append(str(gen.numbers[value]))
        elif kind == "in":
            path = gen.data["inputs"][value]["path"]
            if target == "azureml":
                out.append(f"/mnt/azureml/inputs/{value}")
            elif target == "ray" and not path.startswith(("https://", "/")):
                out.append(f"/home/raytest/trainspec/inputs/{value}")
            else:
                out.append(path)
        else:
            path = gen.data["outputs"][value].get("path")
            volume = settings_.get("volumes", {}).get(value, {})
            if target == "azureml":
                out.append(f"/mnt/azureml/outputs/{value}")
            elif "path" in volume:  # targets.<target>.volumes: its location there
                out.append(volume["path"])
            elif path:
                out.append(path)
            elif target == "hpcpack":
                root = settings_["shared_dir"].rstrip("/") or "/"
                out.append(f"{root}/outputs/{gen.data['name']}/{JOB_ID}/{value}")
            else:  # Kubernetes: the claim's mount (Slurm and Ray: an error without a volume)
                out.append(f"/trainspec/outputs/{value}")
    return out


def run_bash(line: str, env: Dict[str, str], functions: Dict[str, str], printer: Path) -> List[str]:
    """Run ``line`` through bash as a node agent would; each name in ``functions`` prints its argv."""
    defs = "".join(f"{name}() {{ exec {shlex.quote(str(printer))} \"$@\"; }}\n" for name in functions)
    proc = subprocess.run(["bash", "-c", defs + line], capture_output=True, text=True, timeout=300,
                          env={"PATH": os.environ["PATH"], **env}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (line, proc.stderr)
    return json.loads(proc.stdout)


# ================================================================ properties: every target

def check_compiles_cleanly(gen: Gen, workdir) -> None:
    """No exception, no error diagnostic, some files, and two builds give the same bytes."""
    base, printer = workdir
    spec, _, _ = materialize(gen, base, printer)
    try:
        first, _, errors = compile_in_process(spec, gen.target)
        assert errors == [], "\n".join(errors)
        second, _, _ = compile_in_process(spec, gen.target)
        assert files_of(first), "no files"
        assert files_of(first) == files_of(second)
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


# a quoted shell operator is an argument: see test_a_quoted_shell_operator_is_an_argument_not_an_operator
@example(gen=minimal_gen("azureml", [("lit", ";")], launcher="per-node"))
@settings(max_examples=examples(100), **COMMON)
@given(gen=valid_specs("azureml"))
def test_valid_azureml_specs_compile_cleanly_and_deterministically(workdir, gen):
    check_compiles_cleanly(gen, workdir)


@example(gen=minimal_gen("hpcpack", [("lit", ";")]))
@settings(max_examples=examples(100), **COMMON)
@given(gen=valid_specs("hpcpack"))
def test_valid_hpcpack_specs_compile_cleanly_and_deterministically(workdir, gen):
    check_compiles_cleanly(gen, workdir)


@example(gen=minimal_gen("ray", [("lit", "&&")], launcher="per-node"))
@settings(max_examples=examples(100), **COMMON)
@given(gen=valid_specs("ray"))
def test_valid_ray_specs_compile_cleanly_and_deterministically(workdir, gen):
    check_compiles_cleanly(gen, workdir)


@settings(max_examples=examples(100), **COMMON)
@given(gen=valid_specs("slurm"))
def test_valid_slurm_specs_compile_cleanly_and_deterministically(workdir, gen):
    check_compiles_cleanly(gen, workdir)


@example(gen=minimal_gen("kubernetes", [("lit", ";")]))
@settings(max_examples=examples(100), **COMMON)
@given(gen=valid_specs("kubernetes"))
def test_valid_kubernetes_specs_compile_cleanly_and_deterministically(workdir, gen):
    check_compiles_cleanly(gen, workdir)


def compiled(gen: Gen, base: Path, printer: Path):
    """The spec written and compiled to disk; examples the clean-compile property rejects are skipped here
    (that property reports them), so each output property checks outputs only."""
    from hypothesis import assume

    spec, _, _ = materialize(gen, base, printer)
    outcome, out, errors = compile_in_process(spec, gen.target)
    if errors:
        shutil.rmtree(spec.parent, ignore_errors=True)
    assume(not errors)
    write_all(out, outcome.artifacts)
    return spec, outcome, out / gen.data["name"] / gen.target


@settings(max_examples=examples(40), **COMMON)
@given(gen=valid_specs("azureml"))
def test_azureml_job_loads_with_the_counts_and_strings_the_spec_implies(workdir, gen):
    azure_ml = pytest.importorskip("azure.ai.ml")
    base, printer = workdir
    spec, outcome, folder = compiled(gen, base, printer)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            job = azure_ml.load_job(folder / "job.yml")
            body = job._to_job()._to_rest_object().as_dict()["properties"]
        assert body["resources"]["instanceCount"] == gen.nodes
        dist = body["distribution"]
        if gen.framework == "tensorflow":
            assert (dist["distributionType"], dist["workerCount"]) == ("TensorFlow", gen.nodes)
        elif gen.launcher == "mpi":
            assert (dist["distributionType"], dist["processCountPerInstance"]) == ("Mpi", gen.procs)
        elif gen.launcher == "per-node":
            assert (dist["distributionType"], dist["processCountPerInstance"]) == ("PyTorch", 1)
        else:
            assert (dist["distributionType"], dist["processCountPerInstance"]) == ("PyTorch", gen.procs)
        env = body["environmentVariables"]
        for key, value in gen.env.items():
            assert env[key] == value, key
        assert env["TRAINSPEC_NODES"] == str(gen.nodes) and env["TRAINSPEC_PROCS_PER_NODE"] == str(gen.procs)
        assert body.get("description") == (gen.data.get("description") or None)  # "" is no description
        for key, value in gen.data["targets"]["azureml"].get("tags", {}).items():
            assert body["tags"][key] == value, key
        # the command, as Azure ML's shell runs it (inputs/outputs substituted by Azure ML first)
        command = body["command"]
        assert command.startswith("python -I -S ${{inputs.trainspec_runtime}} -- ")
        command = re.sub(r"\$\{\{(inputs|outputs)\.(\w+)\}\}", lambda m: f"/mnt/azureml/{m.group(1)}/{m.group(2)}",
                         command)
        argv = run_bash(command, {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105"},
                        {"python": ""}, printer)
        user = ["train.py", *expected_args(gen, "azureml", settings_=gen.data["targets"]["azureml"],
                                           spec_dir=spec.parent)]
        if gen.launcher == "per-node" and gen.framework not in ("lightning", "tensorflow"):
            wrapped = ["torchrun", "--nnodes", str(gen.nodes), "--nproc_per_node", str(gen.procs), "--node_rank",
                       "1", "--master_addr", "10.0.0.4", "--master_port", "6105", "--no-python",
                       *gen.interpreter.split(), *user]
        else:
            wrapped = [*gen.interpreter.split(), *user]
        assert argv == ["-I", "-S", "/mnt/azureml/inputs/trainspec_runtime", "--", *wrapped]
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def hpcpack_schema():
    lxml = pytest.importorskip("lxml.etree")
    if not XSD.exists():
        return None
    return lxml.XMLSchema(lxml.parse(str(XSD)))


@settings(max_examples=examples(50), **COMMON)
@given(gen=valid_specs("hpcpack"))
def test_hpcpack_xml_is_valid_one_task_per_node_and_bash_gives_the_intended_argv(workdir, hpcpack_schema, gen):
    import lxml.etree as lxml

    base, printer = workdir
    spec, outcome, folder = compiled(gen, base, printer)
    try:
        doc = lxml.parse(str(folder / "job.xml"))
        if hpcpack_schema is not None:  # else: test_hpcpack_xsd_is_here says why
            hpcpack_schema.assertValid(doc)
        root = doc.getroot()
        tasks = root.findall(f"{NS}Tasks/{NS}Task")
        assert len(tasks) == gen.nodes
        assert (root.get("MinNodes"), root.get("MaxNodes")) == (str(gen.nodes), str(gen.nodes))
        settings_ = gen.data["targets"]["hpcpack"]
        # the staged folder, <shared_dir>/<name> as bash stage.sh makes it by hand: `/` gives /<name>
        shim_path = f"{settings_['shared_dir'].rstrip('/')}/{gen.data['name']}/trainspec_shim.py"
        if gen.python_words == ["PRINTER"]:
            python, functions = [str(printer)], {}
        else:
            python, functions = gen.python_words, {gen.python_words[0]: ""}
        user = ["train.py", *expected_args(gen, "hpcpack", settings_=settings_, spec_dir=spec.parent)]
        for rank, task in enumerate(tasks):
            values = {v.findtext(f"{NS}Name"): v.findtext(f"{NS}Value") or ""
                      for v in task.findall(f"{NS}EnvironmentVariables/{NS}Variable")}
            for key, value in gen.env.items():
                assert values[key] == value, key
            assert values["TRAINSPEC_NODE_RANK"] == str(rank)
            assert values["TRAINSPEC_NODES"] == str(gen.nodes)
            if "nodes" in settings_:
                assert task.get("RequiredNodes") == settings_["nodes"][rank]
                assert values["TRAINSPEC_MASTER_ADDR"] == settings_["nodes"][0]
            argv = run_bash(task.get("CommandLine"), {**values, "CCP_JOBID": JOB_ID}, functions, printer)
            if gen.launcher == "per-process":  # one process (the default for it): the task runs it, nothing wraps it
                assert argv == ["-I", "-S", shim_path, "--", *gen.interpreter.split(), *user]
                assert values["TRAINSPEC_LAUNCHER"] == "per-process"
                continue
            assert argv == ["-I", "-S", shim_path, "--", *python, "-m", "torch.distributed.run", "--nnodes", str(gen.nodes),
                            "--nproc_per_node", str(gen.procs), "--no-python", *python,
                            *gen.interpreter.split()[1:], *user]
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


@settings(max_examples=examples(40), **COMMON)
@given(gen=valid_specs("slurm"))
def test_slurm_script_passes_bash_n_and_srun_gets_the_intended_argv_and_env(workdir, gen):
    """job.sbatch run by bash up to srun (a stand-in that records its argv and environment): the
    #SBATCH shape the spec implies, every env value and every argument exactly as the spec says."""
    base, printer = workdir
    spec, outcome, folder = compiled(gen, base, printer)
    try:
        script = (folder / "job.sbatch").read_text(encoding="utf-8")
        assert subprocess.run(["bash", "-n", str(folder / "job.sbatch")]).returncode == 0
        tasks = 1 if gen.launcher == "per-node" else gen.procs
        options = [line[8:] for line in script.splitlines() if line.startswith("#SBATCH ")]
        assert options[:3] == [f"--job-name={gen.data['name']}", f"--nodes={gen.nodes}", f"--ntasks-per-node={tasks}"]
        fake = Path(tempfile.mkdtemp(dir=base))
        (fake / "srun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                   f"open({str(fake / 'calls')!r}, 'a').write(json.dumps([sys.argv[1:], dict(os.environ), "
                                   "os.getcwd()]))\n")
        (fake / "scontrol").write_text("#!/bin/sh\nexit 1\n")
        # the output folders the script makes (`mkdir -p -- ...`) are on the cluster's storage:
        # recorded, not made here; its run folder below SLURM_SUBMIT_DIR is made
        (fake / "mkdir").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                    "if '--' not in sys.argv: os.execv('/bin/mkdir', ['mkdir', *sys.argv[1:]])\n"
                                    f"open({str(fake / 'made')!r}, 'a').write(json.dumps(sys.argv[1:]))\n")
        for stub in ("srun", "scontrol", "mkdir"):
            (fake / stub).chmod(0o755)
        proc = subprocess.run(["bash", str(folder / "job.sbatch")], capture_output=True, text=True, timeout=300,
                              env={"PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_ID": JOB_ID,
                                   "SLURM_SUBMIT_DIR": str(folder)})
        assert proc.returncode == 0, proc.stderr
        argv, env, code = json.loads((fake / "calls").read_text())  # srun runs in the code folder
        volumes = gen.data["targets"]["slurm"].get("volumes", {})
        places = [volumes[name]["path"] if name in volumes else item["path"]
                  for name, item in gen.data.get("outputs", {}).items()]
        made = json.loads((fake / "made").read_text()) if (fake / "made").exists() else None
        assert made == (["-p", "--", *places] if places else None)
        shutil.rmtree(fake, ignore_errors=True)
        for key, value in gen.env.items():
            assert env[key] == value, key
        assert (env["TRAINSPEC_NODES"], env["TRAINSPEC_LAUNCHER"]) == (str(gen.nodes), gen.launcher)
        settings_ = gen.data["targets"]["slurm"]
        python = gen.python_words
        user = ["train.py", *expected_args(gen, "slurm", settings_=settings_, spec_dir=spec.parent)]
        if gen.launcher == "per-node" and gen.framework != "lightning":
            tail = ["torchrun", "--nnodes", str(gen.nodes), "--nproc_per_node", str(gen.procs), "--no-python",
                    *python, *gen.interpreter.split()[1:], *user]
        else:
            tail = [*gen.interpreter.split(), *user]
        image = (gen.data.get("environment") or {}).get("image")
        # every task in the spec's image, with every input (read-only) and output location mounted
        data = [*(f"{item['path']}:{item['path']}:ro" for item in gen.data.get("inputs", {}).values()
                  if "path" in item),
                *(f"{place}:{place}" for place in places)]
        mounts = ",".join([f"{folder}:{folder}", f"{code}:{code}", *dict.fromkeys(data)])
        container = [f"--container-image={PYXIS[image]}", f"--container-mounts={mounts}",
                     f"--container-workdir={code}"] if image else []
        # each task's CPUs (the size's vCPUs among the node's tasks), said to srun as to sbatch
        cpus = [f"--cpus-per-task={max(1, gen.sku.vcpus // tasks)}"] if gen.sku.vcpus else []
        assert argv == ["--kill-on-bad-exit=1", f"--ntasks-per-node={tasks}", *cpus, "--label", *container, *python,
                        "-I", "-S", f"{folder}/trainspec_shim.py", "--", *tail]
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


@settings(max_examples=examples(40), **COMMON)
@given(gen=valid_specs("kubernetes"))
def test_kubernetes_job_is_crd_valid_and_bash_gives_the_intended_argv(workdir, gen):
    """job.yaml as kubectl reads it (PyYAML) passes the pinned CRDs as strict schemas; the counts,
    every env value and, through the container's `bash -c` line, every argument are what the spec
    says (`cd` to the code folder is a path in the pod: a no-op here)."""
    import yaml

    import kube_schema

    base, printer = workdir
    spec, outcome, folder = compiled(gen, base, printer)
    try:
        text = (folder / "job.yaml").read_text(encoding="utf-8")
        assert kube_schema.validate_stream(text) == []
        job = list(yaml.safe_load_all(text))[-1]
        settings_ = gen.data["targets"]["kubernetes"]
        if settings_["api"] == "trainjob":
            container = job["spec"]["trainer"]
            assert container["numNodes"] == gen.nodes
        else:
            replicas = job["spec"]["pytorchReplicaSpecs"]
            container = replicas["Master"]["template"]["spec"]["containers"][0]
            assert replicas["Master"]["replicas"] + replicas.get("Worker", {}).get("replicas", 0) == gen.nodes
            assert job["spec"]["nprocPerNode"] == str(gen.procs)
        assert job["metadata"]["name"] == gen.data["name"]
        assert job["metadata"].get("namespace") == settings_.get("namespace")
        env = {e["name"]: e["value"] for e in container["env"]}
        for key, value in gen.env.items():
            assert env[key] == value, key
        assert env["TRAINSPEC_NODES"] == str(gen.nodes)
        bash, dash_c, line = container["command"]
        assert (bash, dash_c) == ("bash", "-c")
        proc = subprocess.run(["bash", "-c", "cd() { :; }\n" + line], capture_output=True, text=True, timeout=300,
                              env={"PATH": os.environ["PATH"]}, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, (line, proc.stderr)
        printed, decoder, at = [], json.JSONDecoder(), 0  # the printer's argv, once per call
        while at < len(proc.stdout):
            value, at = decoder.raw_decode(proc.stdout, at)
            printed.append(value)
        *copies, argv = printed
        # with the code in the ConfigMap, the job's python first copies it into the pod's writable folder
        assert all(c[:3] == ["-I", "-S", "-c"] and c[-2:] == ["/trainspec/code", "/trainspec/work"] for c in copies)
        user = ["train.py", *expected_args(gen, "kubernetes", settings_=settings_, spec_dir=spec.parent)]
        if gen.launcher == "per-node" and gen.framework != "lightning":  # one process alone runs as written
            tail = ["torchrun", "--nnodes", str(gen.nodes), "--nproc_per_node", str(gen.procs), "--no-python",
                    str(printer), *gen.interpreter.split()[1:], *user]
        else:
            tail = [*gen.interpreter.split(), *user]
        assert argv == ["-I", "-S", "/trainspec/trainspec_shim.py", "--", *tail]
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


def test_hpcpack_xsd_is_here():
    if not XSD.exists():
        pytest.skip(f"the HPC Pack XSD is not here ({XSD}): the XML properties ran without schema validation")




@settings(max_examples=examples(30), **COMMON)
@given(gen=valid_specs("ray"))
def test_ray_cluster_passes_rays_validation_and_the_launch_line_round_trips(workdir, gen):
    pytest.importorskip("ray")
    import yaml

    base, printer = workdir
    spec, outcome, folder = compiled(gen, base, printer)
    try:
        config = yaml.safe_load((folder / "cluster.yaml").read_text(encoding="utf-8"))
        ray_validate(config)
        assert ray_target.cluster_problems(config) == []
        settings_ = gen.data["targets"]["ray"]
        types = config["available_node_types"]
        workers = gen.nodes - 1 if settings_["head"] == "worker" else gen.nodes
        assert sum(t.get("min_workers", 0) for t in types.values()) == workers
        # launch.sh: `ray exec cluster.yaml CMD`, then CMD on the head, then the command each actor runs
        fake = Path(tempfile.mkdtemp(dir=base))
        (fake / "ray").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                  f"open({str(fake / 'calls')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
        (fake / "ray").chmod(0o755)
        proc = subprocess.run(["bash", str(folder / "launch.sh")], capture_output=True, text=True, timeout=300,
                              env={"PATH": f"{fake}:{os.environ['PATH']}", "HOME": "/home/raytest"})
        assert proc.returncode == 0, proc.stderr
        calls = [json.loads(line) for line in (fake / "calls").read_text().splitlines()]
        shutil.rmtree(fake, ignore_errors=True)
        exec_call = next(c for c in calls if c[0] == "exec")
        assert exec_call[1] == "cluster.yaml"
        python = shlex.split(settings_.get("python", "python"))
        argv = run_bash(exec_call[2], {"HOME": "/home/raytest"}, {python[0]: ""}, printer)
        assert argv == [*python[1:], f"trainspec/{ray_target.DRIVER_FILE}", f"trainspec/{ray_target.REQUEST_FILE}"]
        # the request, as the driver's own reader takes it
        request = read_request(str(folder / ray_target.REQUEST_FILE))
        env = request.env
        for key, value in gen.env.items():
            assert env[key] == value, key
        assert env["TRAINSPEC_NODES"] == str(gen.nodes)
        actor = run_bash(request.command, {"HOME": "/home/raytest"}, {python[0]: ""}, printer)
        user = ["train.py", *expected_args(gen, "ray", settings_=settings_, spec_dir=spec.parent)]
        if gen.launcher == "per-node" and gen.framework != "lightning":
            wrapped = ["torchrun", "--nnodes", str(gen.nodes), "--nproc_per_node", str(gen.procs), "--no-python",
                       *python, *gen.interpreter.split()[1:], *user]
        else:
            wrapped = [*gen.interpreter.split(), *user]
        assert actor == [*python[1:], "-I", "-S", "/home/raytest/trainspec/trainspec_shim.py", "--", *wrapped]
    finally:
        shutil.rmtree(spec.parent, ignore_errors=True)


# ---------------------------------------------------------------- regressions found by the properties


def _one_spec(tmp_path: Path, target: str, command: str = "python train.py", env: str = "{A: b}",
              extra: str = "") -> Path:
    settings_ = {"azureml": "azureml: {compute: gpu-cluster}", "hpcpack": "hpcpack: {shared_dir: /app}",
                 "kubernetes": "kubernetes: {}", "ray": "ray: {location: eastus, resource_group: rg}", "slurm": "slurm: {partition: gpu}"}[target]
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: regression
code: {CODE}
command: {command}
resources: {{nodes: 2, sku: Standard_ND96isr_H100_v5}}
distribution: {{launcher: per-node}}
environment: {{image: pytorch:latest}}
env: {env}
{extra}targets:
  {settings_}
""", encoding="utf-8")
    return spec


@pytest.mark.parametrize("target", [
    "azureml", "hpcpack", "kubernetes", "ray", "slurm"])
def test_a_quoted_shell_operator_is_an_argument_not_an_operator(tmp_path, target):
    """Bug: `python train.py --sep ';'` (per-node) is rejected with "contains shell operators".

    Minimal example: command `python train.py ';'`, launcher per-node, target hpcpack (or azureml, ray):
    `error: command: HPC Pack runs the command under torchrun, but it contains shell operators`.
    torchrun gets `train.py ;` as argv and bash passes `';'` as one argument: the command is
    fine. base.torchrun_problem() checks the lexer's tokens after quote removal, so a quoted
    `;`, `&&`, `|`, `(`... looks like an operator; it must look at unquoted punctuation only.
    """
    for arg in ["';'", "'&&'", "'|'", "'>'", "\"(\""]:
        spec = _one_spec(tmp_path, target, command=f"python train.py --sep {arg}")
        outcome = build(str(spec), tmp_path / "out", [target])
        errors = [d.render() for d in outcome.diagnostics if d.is_error]
        assert errors == [], f"{arg}: {errors}"


# ================================================================ the shim: platform worlds

PLATFORMS = ["azureml-pytorch", "azureml-pytorch-per-node", "azureml-mpi", "torchrun", "hpcpack", "tensorflow",
             "ray", "ray-per-node", "slurm", "slurm-per-node"]
# the platform starts one process per node (which launches the workers, or is the worker: TensorFlow)
PER_NODE = {"azureml-pytorch-per-node", "hpcpack", "tensorflow", "ray-per-node", "slurm-per-node"}
RAY_PORT = 41234  # a port trainspec's Ray driver found free on rank 0's node


def platform_envs(platform: str, nodes: int, procs: int, spec_nodes: int, spec_procs: int,
                  port: Optional[int], master: str = "10.0.0.4", batchai: bool = False) -> List[Dict[str, str]]:
    """The variables each process gets from the platform, plus the TRAINSPEC_* the compiler wrote."""
    launcher = {"azureml-pytorch": "per-process", "azureml-mpi": "mpi", "tensorflow": "per-node",
                "ray": "per-process", "slurm": "per-process"}.get(platform, "per-node")
    expect = {"TRAINSPEC_NODES": str(spec_nodes), "TRAINSPEC_PROCS_PER_NODE": str(spec_procs),
              "TRAINSPEC_LAUNCHER": launcher, "TRAINSPEC_SPEC": "specs/x.yaml"}
    if port is not None:
        expect["TRAINSPEC_MASTER_PORT"] = str(port)
    launched = 1 if platform in PER_NODE else procs
    envs = []
    for rank in range(nodes * launched):
        node, local = divmod(rank, launched)
        if platform in ("azureml-pytorch", "azureml-pytorch-per-node"):
            env = {"AZUREML_RUN_ID": "run-1", "MASTER_ADDR": master, "MASTER_PORT": "6105",
                   "WORLD_SIZE": str(nodes * launched), "NODE_RANK": str(node), "RANK": str(rank),
                   "LOCAL_RANK": str(local)}
        elif platform == "azureml-mpi":
            env = {"AZUREML_RUN_ID": "run-1", "OMPI_COMM_WORLD_RANK": str(rank),
                   "OMPI_COMM_WORLD_SIZE": str(nodes * procs), "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                   "OMPI_COMM_WORLD_LOCAL_SIZE": str(procs), "OMPI_COMM_WORLD_NODE_RANK": "0"}
            if batchai or nodes == 1:  # older images: the Batch AI name, host only
                env["AZ_BATCHAI_MPI_MASTER_NODE"] = master
            else:  # host:port, the port Azure Batch's own (never used for the rendezvous)
                env["AZ_BATCH_MASTER_NODE"] = f"{master}:6000"
        elif platform == "torchrun":
            env = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": master, "MASTER_PORT": "29500",
                   "WORLD_SIZE": str(nodes * procs), "RANK": str(rank), "LOCAL_RANK": str(local),
                   "LOCAL_WORLD_SIZE": str(procs), "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nodes),
                   "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(nodes * procs)}
        elif platform == "hpcpack":
            env = {"CCP_JOBID": JOB_ID, "CCP_TASKID": str(rank + 1), "CCP_RETRY_COUNT": "0",
                   "CCP_NODES": f"1 GPUNODE-{rank:03d} 24", "TRAINSPEC_NODE_RANK": str(rank),
                   "TRAINSPEC_MASTER_ADDR": master}
        elif platform in ("ray", "ray-per-node"):
            # trainspec_ray_driver.py: per node, the node's launcher process (rank = node rank)
            env = {"TRAINSPEC_RAY": "1", "MASTER_ADDR": master, "MASTER_PORT": str(port or RAY_PORT),
                   "WORLD_SIZE": str(nodes * launched), "RANK": str(rank), "LOCAL_RANK": str(local),
                   "LOCAL_WORLD_SIZE": str(launched), "NODE_RANK": str(node)}
        elif platform in ("slurm", "slurm-per-node"):
            # srun: one task per process (or per node); the master is the first host of the node list
            hosts = ",".join([master] + [f"10.0.1.{i}" for i in range(1, nodes)])
            env = {"SLURM_JOB_ID": JOB_ID, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local),
                   "SLURM_NODEID": str(node), "SLURM_NTASKS": str(nodes * launched), "SLURM_JOB_NUM_NODES": str(nodes),
                   "SLURM_JOB_NODELIST": hosts, "SLURM_NTASKS_PER_NODE": str(launched)}
        else:
            workers = [f"{master if i == 0 else f'10.0.1.{i}'}:2222" for i in range(nodes)]
            env = {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}})}
        envs.append({**env, **expect})
    return envs


def expected_port(platform: str, port: Optional[int]) -> int:
    if platform == "torchrun":
        return 29500  # torchrun owns its rendezvous: the shim keeps its port
    if port is not None:
        return port
    slurm = 15000 + int(JOB_ID[-4:])  # no port from Slurm nor the spec: derived from the job id, as Lightning does
    return {"hpcpack": shim.HPCPACK_MASTER_PORT, "tensorflow": 2222, "ray": RAY_PORT,
            "ray-per-node": RAY_PORT, "slurm": slurm, "slurm-per-node": slurm}.get(platform, shim.AZUREML_MASTER_PORT)


@settings(max_examples=examples(300), **COMMON)
@given(platform=st.sampled_from(PLATFORMS), nodes=st.integers(1, 6), procs=st.integers(1, 8),
       port=st.none() | st.integers(1024, 65535), batchai=st.booleans())
def test_shim_gives_every_process_a_consistent_rank(platform, nodes, procs, port, batchai):
    envs = platform_envs(platform, nodes, procs, nodes, procs, port, batchai=batchai)
    launched = 1 if platform in PER_NODE else procs
    worlds, exports = [], []
    for env in envs:
        worlds.append(normalize_environment(dict(env), apply=False))
        applied = dict(env)
        normalize_environment(applied, apply=True)
        exports.append(applied)
    ranks = sorted(w.rank for w in worlds)
    assert ranks == list(range(nodes * launched))  # no gap, no duplicate
    for world, applied in zip(worlds, exports):
        assert world.node_rank == world.rank // launched and world.local_rank == world.rank % launched
        assert (world.world_size, world.nodes, world.local_world_size) == (nodes * launched, nodes, launched)
        assert applied["NODE_RANK"] == str(world.node_rank)
        if platform in PER_NODE or platform == "azureml-pytorch-per-node":
            # a launcher per node (torchrun / Lightning) spawns the workers: no per-process variables
            assert "RANK" not in applied and "LOCAL_RANK" not in applied and "WORLD_SIZE" not in applied
            assert applied["PET_NODE_RANK"] == str(world.node_rank) and applied["PET_NNODES"] == str(nodes)
            assert applied["PET_NPROC_PER_NODE"] == str(procs)
        else:
            assert (applied["RANK"], applied["LOCAL_RANK"], applied["WORLD_SIZE"]) == (
                str(world.rank), str(world.local_rank), str(nodes * procs))
    assert {(w.master_addr, w.master_port) for w in worlds} == {("10.0.0.4", expected_port(platform, port))}
    assert len({(a["MASTER_ADDR"], a["MASTER_PORT"]) for a in exports}) == 1


def _names_both(message: str, platform_value: int, spec_value: int) -> bool:
    def has(n):
        return re.search(rf"(?<![\d.]){n}(?![\d.])", message) is not None
    return has(platform_value) and has(spec_value)


@st.composite
def disagreeing_worlds(draw):
    platform = draw(st.sampled_from(PLATFORMS))
    nodes, procs = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    spec_nodes = draw(st.integers(1, 5))
    spec_nodes += spec_nodes >= nodes  # any other node count
    if platform == "hpcpack":
        # a task knows only itself: fewer tasks than TRAINSPEC_NODES is torchrun's rendezvous timeout,
        # not the shim's to see; more tasks than it (an edited job) is
        nodes = draw(st.integers(2, 6))
        spec_nodes = draw(st.integers(1, nodes - 1))
    spec_procs = procs
    if platform not in PER_NODE and draw(st.booleans()):
        spec_nodes = draw(st.integers(1, 6))
        spec_procs = draw(st.integers(1, 7))
        spec_procs += spec_procs >= procs  # another process count, same or another node count
    return platform, nodes, procs, spec_nodes, spec_procs


@settings(max_examples=examples(300), **COMMON)
@given(world=disagreeing_worlds())
def test_a_world_that_disagrees_with_the_spec_fails_naming_both_numbers(world):
    """Some process fails at once (the job cannot hang), and every failure names the platform's number
    and the spec's for a quantity that disagrees (world size, processes per node, nodes)."""
    platform, nodes, procs, spec_nodes, spec_procs = world
    launched, spec_launched = (1, 1) if platform in PER_NODE else (procs, spec_procs)
    pairs = [(nodes * launched, spec_nodes * spec_launched), (launched, spec_launched), (nodes, spec_nodes)]
    pairs = [p for p in pairs if p[0] != p[1]]
    failures = []
    for rank, env in enumerate(platform_envs(platform, nodes, procs, spec_nodes, spec_procs, None)):
        try:
            normalize_environment(dict(env), apply=False)
        except shim.ShimError as error:
            failures.append((rank, str(error)))
    assert failures, "no process noticed"
    for rank, message in failures:
        if platform == "hpcpack":
            # a task sees only itself: the numbers are its baked node rank and node count
            assert _names_both(message, rank, spec_nodes) and "TRAINSPEC_NODES" in message, message
            continue
        assert any(_names_both(message, a, b) for a, b in pairs), (pairs, message)
        assert "resources." in message, message


def test_shim_names_the_spec_when_the_platform_starts_another_shape():
    """Bug: when Azure ML's pytorch distribution starts another number of processes per node than the
    spec says, the shim's message blames the platform or names a variable the platform never set.

    Azure ML sets no LOCAL_WORLD_SIZE; _torch_style() falls back to the spec's procs_per_node and
    verify()/_described() then report that number as "(LOCAL_WORLD_SIZE=n)". Minimal examples
    (platform nodes x processes, spec nodes x processes, the failing rank), as of this writing:

    - 1x1 vs 1x2, rank 0: "WORLD_SIZE=1: world size 1 is not a multiple of the processes per node 2"
      (shim._nodes() raises from _torch_style() before verify() can compare 1 with 2);
    - 1x2 vs 2x1, rank 1: "local_rank 1 (LOCAL_RANK=1) is outside 0..0 (LOCAL_WORLD_SIZE=1)";
    - 2x4 vs 4x2, rank 4: "rank 4 ... the platform did not place consecutive ranks on the same node",
      which is not what happened, and resources.procs_per_node is not named.

    Expected: resources.procs_per_node named with the spec's number and what the platform shows
    (LOCAL_RANK=1: at least 2 processes per node; (RANK - LOCAL_RANK) / NODE_RANK = 4 when
    NODE_RANK > 0), and no "(LOCAL_WORLD_SIZE=...)" when the platform did not set it.
    Where: trainspec/runtime/shim.py, _torch_style(), _nodes(), verify(), _described().
    """
    cases = [((1, 1, 1, 2), 0), ((1, 2, 2, 1), 1), ((2, 4, 4, 2), 4)]
    for (nodes, procs, spec_nodes, spec_procs), rank in cases:
        env = platform_envs("azureml-pytorch", nodes, procs, spec_nodes, spec_procs, None)[rank]
        with pytest.raises(shim.ShimError) as info:
            normalize_environment(dict(env), apply=False)
        message = str(info.value)
        assert "resources.procs_per_node" in message and "(LOCAL_WORLD_SIZE=" not in message, \
            f"platform {nodes}x{procs}, spec {spec_nodes}x{spec_procs}, rank {rank}: {message}"


# ================================================================ invalid specs: one field broken at a time

# path (None = this target's settings) -> wrong values: type, range, enum, format, meaning
BREAKS: List[Tuple[Tuple, List[Any]]] = [
    (("version",), ["1", 2, 1.5, True, 1.0]),
    (("name",), [5, "Bad Name", "../x", "", "-x", "a" * 64, ["x"]]),
    (("code",), [5, "", "does/not/exist", ["."]]),
    (("command",), [5, "", {"a": 1}, ["python", "x.py"], "python train.py {{ nope }}", "python 'unclosed"]),
    (("description",), [5, ["x"]]),
    (("framework",), ["pytorchh", "PyTorch", 1]),
    (("resources", "nodes"), [0, -1, 2.5, "2", True, 1025, None]),
    (("resources", "gpus_per_node"), [-1, 17, 2.5, "4", False]),
    (("resources", "procs_per_node"), [0, 257, "2", 1.5]),
    (("resources", "sku"), [5, "", "Standard_Nope_v9"]),
    (("resources", "spot"), ["yes", 1, "true"]),
    (("resources", "shm_size"), ["16", "16gb", 16, "0g"]),
    (("resources", "cpus_per_node"), [0, 1025, "8", 2.5, True, 1000]),  # 1000: more than any size has
    (("resources", "memory_per_node"), ["900", "900gb", 900, "0Gi", "1.5Ti", "900Ki", "99999Ti"]),
    (("distribution", "launcher"), ["per-gpu", 1, "MPI"]),
    (("distribution", "backend"), ["nccl2", "NCCL"]),
    (("distribution", "master_port"), [80, 70000, "6105", 6105.5]),
    (("environment", "image"), ["", 5]),
    (("environment", "python"), ["2.7", 3.11, "3"]),
    (("environment", "pip"), ["torch", {"torch": 1}]),
    (("env", "ENVKEY"), [True, [1], {"a": 1}, None]),
    (("vars", "epochs"), [[1], {"a": 1}, None]),
]
TARGET_BREAKS = {
    "azureml": [(("compute",), [5, "bad_name!", "x"]), (("priority",), ["urgent"]), (("job_tier",), ["gold"]),
                (("timeout",), ["2 days", 0, True]), (("tags",), [5, ["a"]]), (("experiment_name",), ["bad name"])],
    "hpcpack": [(("shared_dir",), ["rel/path", "/a b", "/x;y", 5]), (("rdzv_port",), [80, "29400"]),
                (("priority",), ["Max"]), (("runtime",), ["forever", -5]), (("nodes",), ["NODE1", ["A", "B!", "C"]]),
                (("python",), ["", 3])],
    "ray": [(("location",), ["East US", "EastUS", "eastuss"]), (("resource_group",), ["", "a b", 5]),
            (("head",), ["gpu"]), (("idle_timeout_minutes",), [-1, "10"]), (("ray_version",), ["latest"]),
            (("ssh_user",), ["Root"]), (("subscription_id",), ["abc"])],
    "kubernetes": [(("api",), ["tfjob", "TrainJob"]), (("namespace",), ["ML", "a b", 5, "a" * 64, "ml\n"]),
                   (("queue",), ["a b", "", "q\n"]), (("timeout",), ["soon", 0, True, "1e9", 1.5, 10 ** 30]),
                   (("image_pull_secrets",), ["acr", ["Bad_Secret"], ["acr\n"]]), (("node_selector",), [5, "gpu"]),
                   (("tolerations",), ["x", [{"value": "x"}]]),
                   (("rdma_resource",), ["RDMA IB", "ib", "nvidia.com/gpu"]), (("python",), ["", 3, "'x"]),
                   (("runtime",), ["Torch", "a" * 254]), (("service_account",), ["Trainer"])],
    "slurm": [(("partition",), ["gpu nodes", "a'b", 5]), (("time",), ["forever", 0]), (("exclusive",), ["yes"]),
              (("constraint",), ["a100 & ib"]), (("logs",), ["my logs"]), (("python",), ["'x", ""])],
}
UNKNOWN_KEY_PARENTS = [(), ("resources",), ("distribution",), ("environment",), ("targets",)]


def spread(options: List[Any], salt: Any):
    """One of ``options``, about equally often: sampled_from (and integers) favour the first ones
    strongly, so the draw is offset by a hash of ``salt`` (the generated spec)."""
    offset = zlib.crc32(json.dumps(salt, sort_keys=True, default=repr).encode())
    return st.integers(0, len(options) - 1).map(lambda i: options[(i + offset) % len(options)])


@st.composite
def broken_specs(draw):
    """(target, data with one field broken, the broken path, whether the error points at the key)."""
    target = draw(st.sampled_from(["azureml", "hpcpack", "kubernetes", "ray", "slurm"]))
    gen = draw(valid_specs(target))
    data = copy.deepcopy(gen.data)
    kinds = ([("value", path, values) for path, values in BREAKS if path[0] is not None]
             + [("value", ("targets", target) + path, values) for path, values in TARGET_BREAKS[target]]
             + [("unknown-key", parent, None) for parent in UNKNOWN_KEY_PARENTS + [("targets", target)]]
             + [("env-key", ("env",), None)])
    kind, path, values = draw(spread(kinds, gen.data))
    if kind == "unknown-key":
        key = draw(spread(["bogus", "node", "gpu_per_node", "extend", "launch", "sku_name", "Name"], gen.data))
        holder = data
        for part in path:
            holder = holder.setdefault(part, {})
        assume_key_new(holder, key)
        holder[key] = Flow(1)
        return gen, data, path + (key,), True
    if kind == "env-key":
        key = draw(spread(["1BAD", "A-B", "WITH SPACE", "MASTER_ADDR", "TRAINSPEC_X", "RANK"], gen.data))
        data.setdefault("env", {})[key] = "x"
        return gen, data, ("env", key), True
    if path[-1] == "ENVKEY":
        path = ("env", "BROKEN_VALUE")
    if path == ("targets", "hpcpack", "nodes"):
        values = values + [["N%d" % i for i in range(gen.nodes + 1)]]  # one name too many
    value = draw(spread(values, gen.data))
    holder = data
    for part in path[:-1]:
        holder = holder.setdefault(part, {})
    holder[path[-1]] = Flow(value)
    return gen, data, path, False


def assume_key_new(holder: Dict[str, Any], key: str) -> None:
    from hypothesis import assume

    assume(key not in holder)


# in this process (the command line's entry point, as the fuzzer runs it: a process per run costs
# ~0.6 s of start-up and proves nothing more here); no shrinking: the failure message already prints
# the whole spec and the field that was broken
@settings(max_examples=examples(25), phases=(Phase.explicit, Phase.reuse, Phase.generate), **COMMON)
@given(case=broken_specs())
def test_one_broken_field_is_named_at_its_line_and_nothing_is_written(workdir, case):
    gen, data, path, on_key = case
    base, printer = workdir
    folder = Path(tempfile.mkdtemp(dir=base))
    try:
        if not isinstance(data["code"], Flow):
            data["code"] = str(CODE)
        for item in data.get("inputs", {}).values():
            if isinstance(item, dict) and item.get("path") == "RELATIVE":
                item["path"] = os.path.relpath(CODE, folder)
        settings_ = data["targets"].get(gen.target, {})
        if settings_.get("python") == "PRINTER_QUOTED":
            settings_["python"] = shlex.quote(str(printer))
        text, pos = emit(data)
        (folder / "spec.yaml").write_text(text, encoding="utf-8")
        line, key_col, value_col = pos[path]
        with contextlib.chdir(folder):  # the command line's own entry point, as a user in the spec's folder
            code, _, stderr = run_in_process(["validate", "spec.yaml"])
        assert code == 1, stderr
        assert "Traceback" not in stderr and "internal error" not in stderr, stderr
        field = dotted(path)
        col = key_col if on_key else value_col
        exact = f"spec.yaml:{line}:{col}: error: {field}: "
        deeper = re.compile(rf"^spec\.yaml:{line}:\d+: error: {re.escape(field)}\[\d+\]: ")  # a list item
        assert any(l.startswith(exact) or deeper.match(l) for l in stderr.splitlines()), \
            f"expected a line starting with {exact!r}\n--- spec.yaml\n{text}--- stderr\n{stderr}"
        out = folder / "out"
        with contextlib.chdir(folder):
            code, _, stderr = run_in_process(["compile", "spec.yaml", "-o", str(out)])
        assert code == 1 and "Traceback" not in stderr, stderr
        assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))
        assert sorted(p.name for p in folder.iterdir()) in (["spec.yaml"], ["out", "spec.yaml"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_union_value_of_the_wrong_type_is_one_error_at_its_own_path(tmp_path, cli_env):
    """Bug: `vars: {epochs: [1]}` gives four errors at made-up paths instead of one at vars.epochs.

    Minimal example: a valid spec plus the line `vars: {epochs: [1]}`. `trainspec validate` prints
      error: vars.epochs.str: expected a valid string, got a list
      error: vars.epochs.int: expected a valid integer, got a list
      error: vars.epochs.float: ...   error: vars.epochs.bool: ...
    pydantic reports one error per member of the Union (VarValue = Union[StrictStr, StrictInt,
    StrictFloat, StrictBool]) with the member's name appended to the location;
    validate._from_pydantic turns each into a diagnostic at that location. It should print one
    error at `vars.epochs` ("expected a string, number or boolean, got a list").
    """
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"version: 1\nname: v\ncode: {CODE}\ncommand: python train.py\nvars: {{epochs: [1]}}\n")
    proc = subprocess.run([*trainspec_cmd(), "validate", "-t", "hpcpack", str(spec)], env=cli_env,
                          capture_output=True, text=True, timeout=300)
    errors = [l for l in proc.stderr.splitlines() if ": error: vars" in l]
    assert len(errors) == 1 and "spec.yaml:5:16: error: vars.epochs: " in errors[0], proc.stderr


@pytest.mark.parametrize("value", ["true", "1.0"])
def test_version_must_be_the_integer_1(tmp_path, cli_env, value):
    """Bug: `version: true` and `version: 1.0` pass validation (found by the property above).

    Minimal example: a valid spec whose first line is `version: true`; `trainspec validate` exits 0.
    model.Spec.version is Literal[1], and pydantic's literal check compares by equality, where
    True == 1 == 1.0; strict mode does not change that. Every integer field rejects a boolean and
    a float ("expected a valid integer, got True (a boolean)"); version should too, at 1:10.
    """
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"version: {value}\nname: v\ncode: {CODE}\ncommand: python train.py\n"
                    "environment: {image: x}\nresources: {sku: Standard_ND96isr_H100_v5}\n")
    proc = subprocess.run([*trainspec_cmd(), "validate", str(spec)], env=cli_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "spec.yaml:1:10: error: version: " in proc.stderr, proc.stderr


@pytest.mark.parametrize("target", ["hpcpack", "ray"])
def test_an_input_on_the_clusters_storage_need_not_exist_on_this_machine(tmp_path, target):
    """Bug (found writing the valid-spec strategy, which had to use paths of this machine):
    an HPC Pack input must be an absolute path on the nodes (hpcpack.check: "on HPC Pack an input
    is a path on the nodes: it must be absolute", hint "e.g. /data/mnist on the shared storage"), and
    a Ray input with an absolute path is used on the nodes as is (ray.refs_for, not uploaded), but
    validate._check_paths requires every non-URL input path to exist on the machine that compiles:

    Minimal example: `inputs: {mnist: {path: /data/mnist}}` with targets.hpcpack ->
    `error: inputs.mnist.path: local path '/data/mnist' does not exist (relative to the spec)`.
    So `trainspec compile`/`check` of an HPC Pack spec with inputs fails on CI and on any laptop.
    Expected: the existence check only for paths the target uploads (Azure ML local paths, Ray
    relative paths), or a warning.
    """
    spec = _one_spec(tmp_path, target, command="python train.py --data {{ inputs.mnist }}",
                     extra="inputs: {mnist: {path: /data/trainspec-not-here/mnist}}\n")
    outcome = build(str(spec), tmp_path / "out", [target])
    errors = [d.render() for d in outcome.diagnostics if d.is_error]
    assert errors == [], errors
