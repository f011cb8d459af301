import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict

import pytest
import yaml

import trainspec.registry  # noqa: F401,E402  - plugs the targets into the schema, for tests that import schema/ directly

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"


# what the environment held before any test imported trainspec.cli in-process (the fuzzer does):
# importing it sets PYDANTIC_DISABLE_PLUGINS for the CLI's own start-up, and every command a test
# starts afterwards would inherit it as if the user had set it
_PLUGINS = os.environ.get("PYDANTIC_DISABLE_PLUGINS")


# The suite runs in parallel (pytest-xdist, `-n 3 --dist loadgroup` in pyproject.toml). Tests that
# start real engines share what one machine has once: loopback ports (a rank's master port: 6105,
# 29400), a Ray head's ports, the Slurm packages and daemons, network namespaces. Each engine
# module, and every other `realproc` test, runs in a group, one test at a time within a group: Ray
# (each module's head in a network namespace of its own, on Ray's own ports), Slurm (one cluster at
# a time: the same daemon ports in their namespaces, the packages apt-get installs), simulated nodes
# and emulated pods (`--netns`, tests/kube_pods.py, HPC Pack's late tasks: namespaces named after the
# process that made them, every run in a loopback-only namespace of its own; as root only), and the rest on loopback
# (torch.distributed, Lightning, Open MPI: ports on 127.0.0.x, some runs in this namespace). The
# groups share nothing, so they run beside each other: a group's waits (a Ray job's timeout, Slurm's
# polling, a rendezvous) are another group's CPU time, and no group is a third of the suite.
# Everything else goes to whichever worker is free (xdist hands out the groups first, largest
# first).
ENGINE_GROUPS = {
    **dict.fromkeys(("test_ray_driver", "test_submit_ray"), "ray"),
    **dict.fromkeys(("test_slurm_cluster", "test_submit_slurm"), "slurm"),
    **dict.fromkeys(("test_netns", "test_kubernetes_run", "test_kube_pods", "test_hpcpack_run"), "netns"),
    **dict.fromkeys(("test_local_run", "test_runtime_procs", "test_runtime_hpcpack"), "loopback"),
}
# modules where only the `realproc` tests start an engine (the others compile): those join its group
REALPROC_GROUPS = {"test_cpus_memory": "slurm"}


def pytest_itemcollected(item):
    """Each item's group, marked as it is collected: xdist reads the marks when collection ends."""
    module = item.module.__name__.rpartition(".")[2] if getattr(item, "module", None) else ""
    group = ENGINE_GROUPS.get(module)
    if group is None and item.get_closest_marker("realproc"):
        group = REALPROC_GROUPS.get(module, "loopback")
    if group == "netns" and not CAN_UNSHARE:  # their `run --local` runs on this namespace's loopback then
        group = "loopback"
    if group:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """In a worker of --dist loadgroup, every grouped test must carry its group in its id, which is
    what xdist schedules by: a pytest or xdist release that drops it (pytest-dev/pytest-xdist#1386)
    would otherwise run two engine tests at once and fail them at random. Fails the run instead."""
    if getattr(session.config.option, "loadgroup", False):
        lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(f"--dist loadgroup lost the group of {len(lost)} tests ({lost[0]}, ...): "
                                    "this pytest-xdist does not group with this pytest; see pyproject.toml's pin")


@pytest.fixture(autouse=True)
def _own_environment(tmp_path, monkeypatch):
    """Every test's `trainspec check` caches in its own folder, never in the user's ~/.cache
    (tests that study the cache set their own), and starts commands with the environment the
    suite started with."""
    monkeypatch.setenv("TRAINSPEC_CACHE_DIR", str(tmp_path / ".trainspec-cache"))
    if _PLUGINS is None:
        monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", _PLUGINS)


@pytest.fixture
def repo() -> Path:
    return REPO


def trainspec_cmd():
    """The console script of the interpreter running the tests (works without an activated venv)."""
    script = Path(sys.executable).with_name("trainspec")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainspec.cli"]


# --- a user's repository of specs (the GitOps tests) -----------------------------------------

SPEC_NAMES = ["mnist-lightning.yaml", "single-node.yaml", "hpcpack-ddp.yaml"]


def run(args, cwd, check=False, env=None, **kw):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, **kw)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# The commands ts() runs in this process: they read and write files and print, nothing more (no
# fork: check shares its work with a forked worker; no signal handlers or platform clients: run and
# the job commands). A new process per call cost 0.25-0.45 s of CPU, on 2 cores about a tenth of
# the suite; tests/test_cli.py and the start-up tests still run the console script itself.
IN_PROCESS = frozenset({"validate", "compile", "plan", "diff", "review", "skus", "import", "schema"})


def ts(*args, cwd=REPO, check=False, env=None, **kw):
    """The command line as a user runs it (bounded: a hang guard far above any run): the console
    script in a new process, or for the commands of IN_PROCESS without an env or stdin of their
    own, trainspec.cli.main in this one with the same cwd, exit code and output a pipe gives."""
    import threading

    if env is None and not kw and args and args[0] in IN_PROCESS and threading.current_thread() is threading.main_thread():
        proc = in_process(list(args), cwd)
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc
    return run([*trainspec_cmd(), *args], cwd, check, env, **kw)


class Hang(BaseException):
    """Raised by in_process's alarm: a BaseException, so main()'s 'internal error' net (exit 70)
    does not catch it and a hang fails the test as a hang."""


def in_process(argv, cwd=None, seconds: float = 300, pipes: bool = True) -> subprocess.CompletedProcess:
    """trainspec.cli.main(argv) run in this process, in ``cwd`` (None: where the test is), bounded
    by an alarm unless the test already set one (a second would cancel it); SystemExit is the exit
    code. ``pipes``: stdout and stderr as the console script's UTF-8 pipes (stderr's errors
    backslashreplace, as Python's), read back with universal newlines like subprocess's text mode;
    else the text exactly as main() wrote it (the fuzzer's mutants print what no pipe would carry)."""
    import contextlib
    import io

    from trainspec import cli

    if pipes:
        out, err = io.BytesIO(), io.BytesIO()
        stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
        stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    else:
        stdout, stderr = io.StringIO(), io.StringIO()
    bound = no_hang(seconds, Hang) if signal.getitimer(signal.ITIMER_REAL)[0] == 0 else contextlib.nullcontext()
    before = os.getcwd()
    code: object = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), bound:
            try:
                cli.main(argv)
            except SystemExit as exc:
                code = exc.code
    finally:
        os.chdir(before)
        stdout.flush()
        stderr.flush()
    code = code if isinstance(code, int) else (0 if code is None else 1)
    if not pipes:
        return subprocess.CompletedProcess(["trainspec", *argv], code, stdout.getvalue(), stderr.getvalue())
    text = lambda data: io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()  # noqa: E731
    return subprocess.CompletedProcess(["trainspec", *argv], code, text(out.getvalue()), text(err.getvalue()))


def yq(text: str) -> str:
    """A YAML double-quoted scalar with everything but plain printable characters escaped."""
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif (0x20 <= o <= 0x7E or 0xA0 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD or o >= 0x10000) \
                and o not in (0x2028, 0x2029, 0xFEFF):
            out.append(ch)
        elif o <= 0xFF:
            out.append("\\x%02x" % o)
        elif o <= 0xFFFF:
            out.append("\\u%04x" % o)
        else:
            out.append("\\U%08x" % o)
    return "".join(out) + '"'


def flow(value, unwrap=None) -> str:
    """A value as YAML flow text, every string double-quoted with everything escaped (``unwrap``:
    turns a test's own marker objects into plain values first, at every level)."""
    if unwrap is not None:
        value = unwrap(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return yq(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v, unwrap) for v in value) + "]"
    # a key over 1024 characters is YAML only as an explicit key (`? key : value`)
    return "{" + ", ".join(f"{'? ' if len(str(k)) > 1000 else ''}{yq(str(k))}: {flow(v, unwrap)}"
                           for k, v in value.items()) + "}"


def ray_validate(config: dict) -> dict:
    """Ray's own checks of a cluster config, in the order `ray up` runs them (ray.md §1)."""
    import copy
    import json

    import jsonschema
    import ray
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def installed_closure(requirements, extras=()) -> Dict[str, str]:
    """{canonical name: version} of every distribution ``requirements`` (Requires-Dist strings, with
    ``extras`` of the package that names them) bring, transitively: each marker evaluated, each
    extra followed, read from this environment's installed metadata, offline. Fails naming a
    requirement this environment does not meet. What pip installs into an empty environment from
    an index holding exactly this environment's versions (the test extra installed every extra's
    distributions; the package index is no part of what a test proves, and took 30-70 s to ask)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    found, followed = {}, set()
    todo = [(Requirement(text), set(extras)) for text in requirements]
    while todo:
        requirement, active = todo.pop()
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": extra}) for extra in sorted(active) or [""]):
            continue
        try:
            installed = distribution(requirement.name)
        except PackageNotFoundError:
            raise AssertionError(f"{requirement} is not installed here") from None
        assert requirement.specifier.contains(installed.version, prereleases=True), \
            (str(requirement), installed.version)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        found[name] = installed.version
        if (name, frozenset(requirement.extras)) not in followed:
            followed.add((name, frozenset(requirement.extras)))
            todo.extend((Requirement(text), set(requirement.extras)) for text in installed.requires or [])
    return found


def slurm_image(script: str):
    """What job.sbatch runs every task in: its `image=` line's value as bash reads it (srun is given
    `--container-image="$image"`), checked to be what srun is given; None without an image."""
    import shlex

    lines = script.splitlines()
    found = [shlex.split(line, comments=True) for line in lines if line.startswith("image=")]
    srun = shlex.split(next(line for line in lines if line.startswith("srun ")))
    if not found:
        assert not any(word.startswith("--container-image") for word in srun), srun
        return None
    [[assignment]] = found
    assert "--container-image=$image" in srun, srun
    return assignment.split("=", 1)[1]


def git(*args, cwd):
    return run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd, check=True).stdout


def spec_repo(tmp_path: Path) -> Path:
    """A user's repository: specs, their training code, the compiled outputs committed on main."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    for name in SPEC_NAMES:
        shutil.copy(REPO / "specs" / name, root / "specs" / name)
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "schema", root / "schema")
    git("init", "-q", "-b", "main", cwd=root)
    ts("compile", "specs/", "-o", "build/", cwd=root, check=True)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "specs and outputs", cwd=root)
    return root


def example_specs(target: str) -> Dict[str, dict]:
    """The example specs (specs/*.yaml) that name ``target``, each with its settings for it (its
    base's, under what the spec itself says)."""
    found = {}
    for path in sorted(SPECS.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        targets = dict(yaml.safe_load((path.parent / spec["extends"]).read_text()).get("targets") or {}) \
            if spec.get("extends") else {}
        targets.update(spec.get("targets") or {})
        if target in targets:
            found[path.name] = targets[target] or {}
    return found


def copy_examples(root: Path) -> None:
    """specs/ as checked in, with the folders their relative paths reach (code, bases), under ``root``."""
    for folder in ("specs", "examples", "bases"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))


def job_of(spec: Path, target: str):
    """(the name submit gives the spec's job on ``target``, the full digest it records with it):
    what a pull request's reader can compute from the spec alone."""
    from trainspec.registry.build import build
    from trainspec.review.naming import platform_job

    outcome = build(str(spec), Path(spec).parent / "build", [target])
    assert outcome.ok, [d.render() for d in outcome.diagnostics]
    [artifact] = outcome.artifacts
    return platform_job(outcome, artifact)


def edit(path: Path, old: str, new: str):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture
def cli_env():
    return path_env()


# --- real processes: started, found and stopped by the tests that start them ----------------------

# root with unshare and ip: run a command inside a loopback-only network namespace
# What a hostile job prints (issue 40): a window title, a clear screen, hidden text, GitHub workflow
# commands (one indented, the older `##[` form mid-line), and the invisible characters
HOSTILE_OUTPUT = ["\x1b]0;pwned\x07title", "\x1b[2J\x1b[Hcleared", "a \x1b[8mhidden\x1b[0m word",
                  "::add-mask::hunter2", "  ::stop-commands::tok", "::error file=.github/workflows/ci.yml,line=1::forged",
                  "step ##[add-mask]hunter2", "zero\u200bwidth hangul\u3164filler braille\u2800blank"]
# ... and each as trainspec prints it: data
HOSTILE_SHOWN = ["\\x1b]0;pwned\\x07title", "\\x1b[2J\\x1b[Hcleared", "a \\x1b[8mhidden\\x1b[0m word",
                 "\\::add-mask::hunter2", "\\  ::stop-commands::tok",
                 "\\::error file=.github/workflows/ci.yml,line=1::forged", "step ##\\x5badd-mask]hunter2",
                 "zero\\u200bwidth hangul\\u3164filler braille\\u2800blank"]


def assert_inert(text: str) -> None:
    """Nothing in ``text`` is a terminal escape, an invisible character or a workflow command."""
    for line in text.splitlines():
        assert line.isprintable() and not re.search("[\u2800\u3164]", line), ascii(line)
        assert not line.lstrip().startswith("::") and "##[" not in line, line


CAN_UNSHARE = bool(os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"))


def loopback_only(command):
    """command inside a fresh network namespace with only lo up (sh execs: the pid is command's),
    when the tests can make one; else command as it is."""
    if not CAN_UNSHARE:
        return list(command)
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def path_env(**extra):
    """This environment, with the test interpreter's bin directory first on PATH (its trainspec, python)."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                **extra)


def processes_with(*env_items: str, cmdline: str = ""):
    """Pids of live processes (not zombies) whose environment has every NAME=value in env_items
    and whose command line contains cmdline."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            argv = open(f"/proc/{pid}/cmdline", "rb").read()
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours to read
        if state != "Z" and cmdline.encode() in argv and all(item.encode() in environ for item in env_items):
            found.append(int(pid))
    return found


def kill_processes_with(*env_items: str) -> None:
    """Whatever a failed test left running: SIGKILL to every process with env_items."""
    for pid in processes_with(*env_items):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def in_background(command, env):
    """A background run whose output the test reads as it comes; killed with its group on the way out."""
    runner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=REPO, start_new_session=True)
    try:
        yield runner
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


def sigterm_when(command, env, ready, *env_items: str, timeout: float = 40.0):
    """Start command, read its output until ready(line) says so, send it SIGTERM (as CI cancelling
    a job does) and wait for it. Returns (exit code, stderr, pids still alive with env_items right
    after it exited); whatever is left is then killed."""
    with in_background(command, env) as runner:
        for line in runner.stdout:
            if ready(line):
                break
        else:
            pytest.fail("the run ended before it was ready: " + runner.stderr.read()[-3000:])
        runner.send_signal(signal.SIGTERM)
        try:
            _, errors = runner.communicate(timeout=timeout)
        finally:
            left = processes_with(*env_items)
            kill_processes_with(*env_items)
    return runner.returncode, errors, left


# --- a command that reads the platform's variables (issue 21) ----------------------------------

WORLD_PROBE = """import json, os, sys
import torch, torch.distributed as dist
node_rank, master = sys.argv[1:3]  # $NODE_RANK "$MASTER_ADDR", expanded by the command's shell
dist.init_process_group("gloo")
store = dist.distributed_c10d._get_default_store()
while hasattr(store, "underlying_store"):
    store = store.underlying_store
total = torch.ones(1)
dist.all_reduce(total)
# one write of the whole line: unbuffered (PYTHONUNBUFFERED), print() writes the text and its newline
# apart, and two ranks sharing a pipe would interleave them
sys.stdout.write("TRAINSPEC_RESULT " + json.dumps({"rank": dist.get_rank(), "world_size": dist.get_world_size(),
    "node_rank": node_rank, "master": master, "torch_master": store.host, "allreduce": int(total.item())}) + "\\n")
sys.stdout.flush()
dist.destroy_process_group()
"""
PROBE_COMMAND = 'python probe.py $NODE_RANK "$MASTER_ADDR"'


def world_probe(folder: Path) -> Path:
    """A code folder whose probe.py checks, under a real gloo group, what the command's shell
    expanded: every rank prints the NODE_RANK and MASTER_ADDR it was given and the master torch used."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.py").write_text(WORLD_PROBE)
    return folder


def assert_probed(results, *, master, world=4, per_node=2):
    """Every rank ran, formed one group, and its command read torch's own node rank and master."""
    found = sorted(results, key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(world)), found
    for r in found:
        assert (r["world_size"], r["allreduce"]) == (world, world)
        assert r["node_rank"] == str(r["rank"] // per_node), r
        assert r["master"] == r["torch_master"] == master, r


@contextmanager
def _alarm(timer: int, signum: int, seconds: float, exception):
    """Raise ``exception`` in this thread when ``timer`` (an itimer) rings after ``seconds``."""
    def ring(number, frame):
        raise exception

    previous = signal.signal(signum, ring)
    signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        signal.setitimer(timer, 0)
        signal.signal(signum, previous)


def installed(*modules: str, reason: str) -> None:
    """Skip the module being collected unless every module is installed, found without importing
    it: pytest.importorskip("lightning") imports Lightning (5 s of CPU) in every xdist worker at
    collection, for modules whose tests only start processes that import it."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: {reason}", allow_module_level=True)


def no_hang(seconds: float = 10, raising=AssertionError):
    """Fail instead of hanging: a blocked open() or a runaway loop is interrupted by the alarm
    (``raising``: the exception it raises, e.g. one main()'s own error net does not catch)."""
    return _alarm(signal.ITIMER_REAL, signal.SIGALRM, seconds, raising(f"no answer within {seconds} s (a hang)"))


def cpu_bound(seconds: float):
    """Fail when the block spends more than ``seconds`` of this process's CPU time (user + system:
    ITIMER_PROF), however busy the machine is: a guard far above the work expected, for "fails
    fast" and "grows linearly" without a timed assertion."""
    return _alarm(signal.ITIMER_PROF, signal.SIGPROF, seconds, AssertionError(f"more than {seconds} s of CPU time"))


def sigint_default():
    """``preexec_fn`` of a process a test interrupts as Ctrl-C would: SIGINT back to its default.
    A suite started in the background (`cmd &` in a script, nohup, some CI runners) inherits
    SIGINT ignored, and a Python started so never raises KeyboardInterrupt, as it should not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
