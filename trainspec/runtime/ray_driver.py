"""trainspec's Ray driver: run one job request as every process (or every node) of a training job.

The Ray target writes the request (``trainspec_ray_job.json``: nodes, processes, launcher,
resources, env, command, port; its one definition is runtime/ray_request.py, ``Request``) and
copies this file as ``trainspec_ray_driver.py``, runtime/procs.py as ``trainspec_procs.py`` and
runtime/ray_request.py as ``trainspec_ray_request.py`` next to ``cluster.yaml``; the cluster's
file_mounts put them on the head, and ``ray exec cluster.yaml`` runs it there:

    python trainspec/trainspec_ray_driver.py trainspec/trainspec_ray_job.json

1. One placement-group bundle per node, ``{"CPU": C, "GPU": G}``; STRICT_SPREAD puts each
   on its own node.  Cluster-launcher workers may still be booting when ``ray up`` returns,
   so the driver waits for the group (``--placement-timeout``), then names what it asked
   for and what the cluster has.
2. One actor per process (per-process: N x P, bundle rank // P) or per node (per-node: N;
   the command starts the workers itself, through torchrun or Lightning), each holding its
   share of the bundle.
3. MASTER_ADDR is the IP of the node holding rank 0's bundle -- never blindly the head
   (ray.md 5.10) -- and MASTER_PORT the request's, or a port found free there by rank 0's actor.
4. Every actor runs ``bash -c COMMAND`` in the request's workdir, in its own session, with its
   own environment + the request's env + torch's variables and TRAINSPEC_RAY=1 (read by the
   shim's Ray detector) + GLOO_SOCKET_IFNAME for the interface holding its node's IP.  Lines
   come back to this driver in batches (a ``read`` call that blocks in the actor until there
   are lines or an exit) and are printed as ``[rank R] ...`` or ``[node N] ...``.
5. The job ends as ``procs.Verdict`` says, the rule ``trainspec run --local`` follows too: the
   first process to exit non-zero decides the exit code, the others get ``--grace`` seconds to
   end by themselves, then every process group still running gets SIGTERM, and SIGKILL
   ``--grace`` seconds later; the time limit (the request's ``timeout``, the spec's
   ``timeout:``; ``--timeout`` overrides it) stops everything with 124, and one line says
   which limit fired.  Whatever happens, the
   processes are stopped, the actors killed and the placement group removed before it exits.

Self-contained: the standard library, trainspec_procs.py, trainspec_ray_request.py and ``ray``
(imported only when the run starts), Python >= 3.8.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Mapping, Optional, Sequence, Tuple

try:  # inside the trainspec package (tests, a checkout)
    from . import procs, ray_request
except ImportError:  # shipped by the Ray target: trainspec_procs.py and trainspec_ray_request.py lie here
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under python -I
    import trainspec_procs as procs  # type: ignore[no-redef]
    import trainspec_ray_request as ray_request  # type: ignore[no-redef]

Request = ray_request.Request  # the job, as the Ray target wrote it into trainspec_ray_job.json
MARKER = "TRAINSPEC_RAY"  # the shim's Ray detector looks for it
TAIL_LINES = 20  # lines of the failing process shown again at the end
READ_WAIT = 10.0  # seconds an actor's read() waits for output before answering "nothing yet"
READ_BATCH = 5000  # lines per read() at most
KILL_WAIT = 5.0  # seconds to wait for a process group after SIGKILL
READER_JOIN = 5.0  # seconds to wait for output still buffered in a pipe after the process ended
ACTOR_START_TIMEOUT = 300.0  # seconds for the actors to start once the placement group is ready
PLACEMENT_NOTICE = 30.0  # seconds between "still waiting for the cluster" notices
DRAIN_AFTER_STOP = 10.0  # seconds, beyond the stop itself, to collect the stopped processes' last lines
CANNOT_START = 127  # the exit code of a command that could not be started (missing workdir, no bash)
ACTOR_DIED = 1  # the exit code reported for a process whose actor died (node lost, OOM killer)


class DriverError(Exception):
    """A problem the user can fix; the message is shown as is, without a traceback."""


class _Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP (the ``ray exec`` session went away) reached the driver."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# ---------------------------------------------------------------- the request


def read_request(path: str) -> Request:
    """The request in ``path`` (ray_request.py defines it), every field checked: DriverError names
    the file and the field."""
    try:
        return ray_request.read_request(path)
    except ray_request.RequestError as error:
        raise DriverError(str(error)) from None


@dataclass(frozen=True)
class Options:
    """A request and how this run goes (the operator's choices on the command line)."""

    request: Request
    address: str
    timeout: float  # 0 = none
    grace: float
    placement_timeout: float
    timeout_said: str = ""  # the limit and who set it, for the one line that says it fired
    home: Optional[str] = None  # HOME of every process (--home); None: the node's own

    def __getattr__(self, name: str):  # options.nodes: the request's
        if name == "request":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.request, name)

    @property
    def per_node(self) -> bool:
        return self.launcher == "per-node"

    @property
    def actors(self) -> int:
        return self.nodes if self.per_node else self.nodes * self.procs_per_node

    def label(self, rank: int) -> str:
        return ("node %d" if self.per_node else "rank %d") % rank

    def bundle(self) -> Dict[str, float]:
        bundle: Dict[str, float] = {"CPU": self.cpus_per_node}
        if self.gpus_per_node:
            bundle["GPU"] = float(self.gpus_per_node)
        return bundle

    def actor_resources(self) -> Tuple[float, float]:
        """(num_cpus, num_gpus) of one actor: the whole bundle per node, or a share that fits P times."""
        parts = 1 if self.per_node else self.procs_per_node
        return share(self.cpus_per_node, parts), share(self.gpus_per_node, parts)


def share(total: float, parts: int) -> float:
    """total / parts as Ray accepts it, never more: whole numbers above 1, 4 decimals below."""
    each = total / parts
    if each >= 1:
        return float(math.floor(each))
    return math.floor(each * 10000) / 10000


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError("must be a number of seconds, 0 or more, not %s" % text)
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainspec_ray_driver.py",
        description="Run the job a request describes (trainspec_ray_job.json, written by `trainspec compile -t "
                    "ray`) on the Ray cluster this runs in: one placement-group bundle per node, one actor per "
                    "process (per-process) or per node (per-node), torch's variables set, output prefixed, and "
                    "the first failure stopping all.",
    )
    parser.add_argument("request", metavar="JOB.json", help="the job request the compiler wrote")
    parser.add_argument("--address", default="auto", help="Ray cluster address for ray.init (default auto)")
    parser.add_argument("--timeout", type=_seconds, default=None,
                        help="seconds for the whole run, waiting for the cluster included; 0 = none; default: "
                             "the request's timeout (the spec's `timeout:`), else none; exceeded: everything is "
                             "stopped, exit 124")
    parser.add_argument("--grace", type=_seconds, default=10.0,
                        help="seconds the others get to end by themselves after the first failure, and between "
                             "SIGTERM and SIGKILL when processes are stopped (default 10)")
    parser.add_argument("--home", metavar="DIR", default=None,
                        help="HOME of every process: the folder holding trainspec/ (the command finds the shim "
                             "at $HOME/trainspec). Default: the node's own HOME, where `ray up`'s file_mounts put "
                             "it; a job submitted through Ray's job API ships it in its working_dir instead")
    parser.add_argument("--placement-timeout", type=_seconds, default=1200.0,
                        help="seconds to wait for the cluster to place the bundles; workers may still be "
                             "booting after `ray up` (default 1200)")
    return parser


def parse_args(argv: Sequence[str]) -> Options:
    """The options; argparse exits 2 on a usage error, DriverError says what is wrong in the request."""
    args = _parser().parse_args(list(argv))
    request = read_request(args.request)
    if args.timeout is None and request.timeout is not None:
        timeout, said = float(request.timeout), "the spec's timeout: %s" % duration_text(request.timeout)
    else:
        timeout = args.timeout or 0.0
        said = "--timeout %g s" % timeout
    return Options(request=request, address=args.address, timeout=timeout, grace=args.grace,
                   placement_timeout=args.placement_timeout, timeout_said=said,
                   home=os.path.abspath(args.home) if args.home else None)


def duration_text(seconds: int) -> str:
    """86400 -> 1d, 5400 -> 1h30m: a duration as a spec writes it (core/fields.duration_text's
    twin: the shipped runtime imports nothing of trainspec)."""
    parts = [(seconds // 86400, "d"), (seconds // 3600 % 24, "h"), (seconds // 60 % 60, "m"), (seconds % 60, "s")]
    return "".join("%d%s" % (number, unit) for number, unit in parts if number) or "0s"


# ---------------------------------------------------------------- who is who (pure)


@dataclass(frozen=True)
class Slot:
    """One process of the job: which actor runs it, and its place in the world."""

    actor: int  # index into the started actors
    rank: int  # the launched process's rank (per-node: the node rank)
    node_rank: int
    local_rank: int
    cuda_visible_devices: Optional[str]  # None: leave what Ray set for the actor


def _gpu_key(gpu: str) -> Tuple[int, object]:
    return (0, int(gpu)) if gpu.isdigit() else (1, gpu)


def assign(options: Options, gpus: Sequence[Sequence[str]]) -> List[Slot]:
    """Ranks for the actors, rank order; ``gpus[i]`` are the GPU ids Ray gave actor i.

    Actor i sits in bundle i // P (per-process) or i (per-node), and a bundle is a node, so
    the node rank is the bundle index.  Per-process with GPUs, as Ray Train does: every
    process of a node sees the GPUs of all its node's processes (CUDA_VISIBLE_DEVICES), and
    local ranks follow the GPU ids, so ``cuda:LOCAL_RANK`` is the process's own GPU and the
    processes can reach each other's GPUs (NCCL peer access).
    """
    if options.per_node:
        return [Slot(actor=node, rank=node, node_rank=node, local_rank=0, cuda_visible_devices=None)
                for node in range(options.nodes)]
    slots = []
    per = options.procs_per_node
    for node in range(options.nodes):
        members = list(range(node * per, (node + 1) * per))
        visible = None
        if all(gpus[i] for i in members):
            members.sort(key=lambda i: min(_gpu_key(str(g)) for g in gpus[i]))
            ids = sorted({str(g) for i in members for g in gpus[i]}, key=_gpu_key)
            visible = ",".join(ids)
        for local_rank, actor in enumerate(members):
            slots.append(Slot(actor=actor, rank=node * per + local_rank, node_rank=node, local_rank=local_rank,
                              cuda_visible_devices=visible))
    return slots


def process_env(options: Options, slot: Slot, master_addr: str, master_port: int) -> Dict[str, str]:
    """What the driver adds to an actor's environment: the request's env, then torch's variables.

    Per-node, the variables describe the node's launcher process (rank = node rank, world =
    nodes, one per node), as Azure ML's per-node launch does; the shim then unsets them
    for torchrun or Lightning, which start the workers.
    """
    env = {"PYTHONUNBUFFERED": "1"}  # lines as they are printed, not at exit; the request may say otherwise
    if options.home:
        env["HOME"] = options.home
    env.update(options.env)
    world_size, local_world_size = (options.nodes, 1) if options.per_node else (
        options.nodes * options.procs_per_node, options.procs_per_node)
    env.update({
        MARKER: "1",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(world_size),
        "RANK": str(slot.rank),
        "LOCAL_RANK": str(slot.local_rank),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "NODE_RANK": str(slot.node_rank),
    })
    if slot.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    return env


# ---------------------------------------------------------------- the actor


def _die_with_parent():
    """A preexec_fn: the child gets SIGKILL when the thread that started it dies (Linux), else None.

    A backstop for a killed actor (ray.kill, node OOM): the thread that starts the process
    waits for it, so it lives exactly as long as the process unless the actor dies first.
    Resolved before the fork: the child only makes one C call.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill)

    return preexec


def interface_of(ip: str) -> Optional[str]:
    """The name of this machine's network interface that holds ``ip`` (IPv4), or None.

    gloo picks its interface from the host name, and on images whose /etc/hosts maps the host
    name to 127.0.1.1 (Debian's default) cross-node gloo then fails ("connectFullMesh failed ...
    remote=[127.0.1.1]"). Ray knows the node's real IP; the interface holding it is the one to use.
    """
    import fcntl
    import struct

    siocgifaddr = 0x8915  # Linux ioctl: an interface's IPv4 address
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                packed = fcntl.ioctl(sock.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(packed[20:24]) == ip:
                return name
    return None


def with_interface(env: Dict[str, str], ip: str) -> Dict[str, str]:
    """``env`` plus GLOO_SOCKET_IFNAME = the interface holding this node's IP, unless the user set one."""
    if "GLOO_SOCKET_IFNAME" in env or "GLOO_SOCKET_IFNAME" in os.environ:
        return env
    name = interface_of(ip)
    return {**env, "GLOO_SOCKET_IFNAME": name} if name else env


class Runner:
    """Runs one process on the actor's node: ``bash -c COMMAND``, its own session, output kept for read()."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._lines: List[str] = []
        self._code: Optional[int] = None
        self._pid: Optional[int] = None
        self._done = threading.Event()

    def where(self) -> Tuple[str, List[str]]:
        """This node's IP, and the GPU ids Ray gave this actor."""
        import ray

        return ray.util.get_node_ip_address(), [str(gpu) for gpu in ray.get_gpu_ids()]

    def free_port(self) -> int:
        """A port free on every interface of this node right now."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def start(self, command: str, env: Mapping[str, str], cwd: str) -> None:
        """Start the process in a thread that then waits for it; returns once it is started (or failed)."""
        full_env = dict(os.environ)
        full_env.update(with_interface(dict(env), self.where()[0]))
        started = threading.Event()
        thread = threading.Thread(target=self._own, args=(command, full_env, cwd, started), name="trainspec run",
                                  daemon=True)
        thread.start()
        started.wait()

    def _own(self, command: str, env: Dict[str, str], cwd: str, started: threading.Event) -> None:
        try:
            popen = procs.start_group(["bash", "-c", command], env, cwd, preexec_fn=_die_with_parent())
        except OSError as error:
            problem = "the directory %s does not exist on this node" % cwd if not os.path.isdir(cwd) else error
            self._finish(["trainspec: error: cannot start bash -c in %s on %s: %s"
                          % (cwd, socket.gethostname(), problem)], CANNOT_START)
            started.set()
            return
        with self._cond:
            self._pid = popen.pid
        started.set()
        reader = threading.Thread(target=procs.pump_lines, args=(popen.stdout, self._keep), name="trainspec read",
                                  daemon=True)
        reader.start()
        returncode = popen.wait()
        reader.join(READER_JOIN)  # a child that keeps the pipe open must not hold the exit back
        self._finish([], procs.exit_code(returncode))

    def _keep(self, line: str) -> None:
        with self._cond:
            self._lines.append(line)
            self._cond.notify_all()

    def _finish(self, lines: List[str], code: int) -> None:
        with self._cond:
            self._lines.extend(lines)
            self._code = code
            self._cond.notify_all()
        self._done.set()

    def read(self, wait: float) -> Tuple[List[str], Optional[int]]:
        """Lines printed since the last read, and the exit code once the process ended.

        Blocks up to ``wait`` seconds until there is something to say: ([], None) means
        "still running, nothing printed".
        """
        with self._cond:
            self._cond.wait_for(lambda: self._lines or self._code is not None, timeout=wait)
            lines, self._lines = self._lines[:READ_BATCH], self._lines[READ_BATCH:]
            return lines, (self._code if not self._lines else None)

    def stop(self, grace: float) -> Optional[int]:
        """SIGTERM the process group, SIGKILL after ``grace`` s; the exit code (None: would not die)."""
        with self._cond:
            pid = self._pid
        if pid is not None:
            procs.stop_group(pid, grace, self._done.wait)
            self._done.wait(KILL_WAIT)
        return self._code


# ---------------------------------------------------------------- the driver


def _say(text: str) -> None:
    sys.stderr.write("trainspec: %s\n" % text)
    sys.stderr.flush()


def _fmt(resources: Mapping[str, float]) -> str:
    """{'CPU': 2.0, 'GPU': 4.0} -> 'CPU: 2, GPU: 4', Ray's bookkeeping resources left out."""
    shown = []
    for key in sorted(resources):
        if key.startswith("node:") or key in ("memory", "object_store_memory") or key.startswith("accelerator_type"):
            continue
        value = resources[key]
        shown.append("%s: %s" % (key, int(value) if float(value).is_integer() else round(value, 4)))
    return "{%s}" % ", ".join(shown)


class Driver:
    """One run: ``execute`` does the work, ``cleanup`` (always called) leaves nothing behind."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout if options.timeout else None
        self.ray = None
        self.pg = None
        self.actors: list = []
        self.stop_refs: Optional[list] = None

    def remaining(self, cap: Optional[float] = None) -> Optional[float]:
        """Seconds left before --timeout (at most cap); None: no limit."""
        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        if cap is None:
            return left
        return cap if left is None else min(cap, left)

    def _timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    # -------------------------------------------------------- phases

    def execute(self) -> int:
        import ray

        self.ray = ray
        options = self.options
        try:
            ray.init(address=options.address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise DriverError("cannot connect to the Ray cluster at --address %s: %s; is Ray running here "
                              "(`ray status`)?" % (options.address, error)) from None
        _on_signals()  # after ray.init, which installs its own SIGTERM handler
        if not self._place():
            return self._report_timeout()
        slots, master = self._start_actors()
        if slots is None:
            return self._report_timeout()
        addr, port = master
        _say("ray: %d %s on %d node(s) [%s]; master %s:%d"
             % (len(slots), "node launchers" if options.per_node else "processes", options.nodes,
                options.launcher, addr, port))
        self.ray.get([self.actors[slot.actor].start.remote(options.command, process_env(options, slot, addr, port),
                                                           options.workdir) for slot in slots],
                     timeout=ACTOR_START_TIMEOUT)
        return self._follow(slots)

    def _place(self) -> bool:
        """Create the placement group and wait for it; False when --timeout ran out first."""
        from ray.util.placement_group import placement_group

        options = self.options
        bundle = options.bundle()
        self.pg = placement_group([dict(bundle) for _ in range(options.nodes)], strategy=options.placement)
        ready = self.pg.ready()
        waited_until = time.monotonic() + options.placement_timeout
        while True:
            left = max(0.0, waited_until - time.monotonic())
            budget = self.remaining(min(PLACEMENT_NOTICE, left))
            done, _ = self.ray.wait([ready], timeout=budget)
            if done:
                return True
            if self._timed_out():
                return False
            if time.monotonic() >= waited_until:
                raise DriverError(
                    "the cluster could not place %d bundle(s) of %s with %s%s within %g s (--placement-timeout); "
                    "%s" % (options.nodes, _fmt(bundle), options.placement,
                            " (each on its own node)" if options.placement == "STRICT_SPREAD" else "",
                            options.placement_timeout, self._cluster_text()))
            _say("waiting for the cluster to place %d bundle(s) of %s (%s); %s"
                 % (options.nodes, _fmt(bundle), options.placement, self._cluster_text()))

    def _cluster_text(self) -> str:
        try:
            total = self.ray.cluster_resources()
            nodes = [node for node in self.ray.nodes() if node.get("Alive")]
        except Exception as error:  # the GCS went away: say so instead of hiding the first problem
            return "the cluster's resources are unknown (%s)" % error
        listed = "; ".join("%s %s" % (node.get("NodeManagerAddress", "?"), _fmt(node.get("Resources", {})))
                           for node in nodes)
        return "the cluster has %s on %d alive node(s): %s -- are workers still starting (`ray status`)?" % (
            _fmt(total), len(nodes), listed or "none")

    def _start_actors(self):
        """Start the actors; (slots in rank order, (master_addr, master_port)), or (None, None) on --timeout."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options = self.options
        runner = self.ray.remote(Runner)
        num_cpus, num_gpus = options.actor_resources()
        per_bundle = 1 if options.per_node else options.procs_per_node
        for index in range(options.actors):
            strategy = PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=index // per_bundle)
            self.actors.append(runner.options(
                num_cpus=num_cpus, num_gpus=num_gpus, max_concurrency=4, max_restarts=0,
                scheduling_strategy=strategy).remote())
        refs = [actor.where.remote() for actor in self.actors]
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=self.remaining(ACTOR_START_TIMEOUT))
        if len(done) < len(refs):
            if self._timed_out():
                return None, None
            raise DriverError("%d of %d actors did not start within %g s although the placement group is ready"
                              % (len(refs) - len(done), len(refs), ACTOR_START_TIMEOUT))
        try:
            places = self.ray.get(refs)
        except self.ray.exceptions.RayError as error:
            raise DriverError("an actor could not start: %s" % _first_line(error)) from None
        slots = assign(options, [gpus for _, gpus in places])
        rank0 = self.actors[slots[0].actor]
        master_addr = places[slots[0].actor][0]  # the node holding rank 0's bundle
        port = options.master_port
        if port is None:
            found, _ = self.ray.wait([rank0.free_port.remote()], timeout=self.remaining(60.0))
            if not found:
                return None, None
            port = self.ray.get(found[0])
        return slots, (master_addr, port)

    def _follow(self, slots: List[Slot]) -> int:
        """Print every process's lines until all ended; the job ends as procs.Verdict says (the first
        failure, after the others' grace; or --timeout), and then every process still running is stopped."""
        options = self.options
        ray = self.ray
        labels = {slot.actor: options.label(slot.rank) for slot in slots}
        tails: Dict[int, Deque[str]] = {slot.actor: deque(maxlen=TAIL_LINES) for slot in slots}
        pending = {self.actors[slot.actor].read.remote(READ_WAIT): slot.actor for slot in slots}
        verdict = procs.Verdict(len(slots), options.grace, self.deadline)
        drain_until = None  # once stopping: when to give up collecting the last lines
        while pending:
            if drain_until is None and verdict.over:
                drain_until = self._stop_all()
            if drain_until is not None:
                budget: Optional[float] = max(0.0, drain_until - time.monotonic())
            else:
                left = verdict.budget()
                budget = READ_WAIT * 3 if left is None else min(READ_WAIT * 3, left)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=budget)
            if not ready:
                if drain_until is not None and time.monotonic() >= drain_until:
                    break  # the cleanup kills what is left
                continue
            actor = pending.pop(ready[0])
            try:
                lines, code = ray.get(ready[0])
            except ray.exceptions.RayError as error:
                lines, code = ["trainspec: error: the Ray actor running this process died: %s"
                               % _first_line(error)], ACTOR_DIED
            if lines:
                prefix = "[%s] " % labels[actor]
                sys.stdout.write("".join(prefix + line + "\n" for line in lines))
                sys.stdout.flush()
                tails[actor].extend(lines)
            if code is None:
                pending[self.actors[actor].read.remote(READ_WAIT)] = actor
            elif drain_until is None:
                verdict.ended(actor, code)
        elapsed = time.monotonic() - self.started
        if verdict.failed is not None:
            actor = verdict.failed
            _say("error: %s exited with code %d after %.1f s; the run was stopped. Its last lines:"
                 % (labels[actor], verdict.exit_code, elapsed))
            for line in tails[actor]:
                sys.stderr.write("  | %s\n" % line)
            sys.stderr.flush()
            return verdict.exit_code
        if verdict.timed_out:
            return self._report_timeout()
        _say("ray: all %d %s exited 0 in %.1f s" % (len(slots), "nodes" if options.per_node else "ranks", elapsed))
        return 0

    def _report_timeout(self) -> int:
        _say("error: the job did not finish within its time limit (%s); every process was stopped"
             % (self.options.timeout_said or "--timeout %g s" % self.options.timeout))
        return 124

    def _stop_all(self) -> float:
        """Ask every actor to stop its process; returns until when to keep collecting output."""
        if self.stop_refs is None:
            self.stop_refs = [actor.stop.remote(self.options.grace) for actor in self.actors]
        return time.monotonic() + self.options.grace + KILL_WAIT + DRAIN_AFTER_STOP

    def cleanup(self) -> None:
        """Stop every process, kill the actors, remove the placement group: nothing stays behind."""
        ray = self.ray
        if ray is None:
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the cleanup short
            except (ValueError, OSError):
                pass
        try:
            if self.actors:
                self._stop_all()
                try:
                    ray.wait(self.stop_refs, num_returns=len(self.stop_refs),
                             timeout=self.options.grace + KILL_WAIT + 5.0)
                except Exception:
                    pass
            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:
                    pass
            if self.pg is not None:
                from ray.util.placement_group import remove_placement_group

                try:
                    remove_placement_group(self.pg)
                except Exception:
                    pass
        finally:
            try:
                ray.shutdown()
            except Exception:
                pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _on_signals() -> None:
    """SIGTERM and SIGHUP end the run like Ctrl-C: the cleanup still stops every process."""
    def handler(signum, frame):
        raise _Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(signum, handler)
        except (ValueError, OSError):
            pass  # not the main thread, or no such signal here


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        import ray  # noqa: F401  (only to fail early and clearly)
    except DriverError as error:
        _say("error: %s" % error)
        return 2
    except ImportError as error:
        _say("error: cannot import ray (%s); install it where this driver runs: pip install ray" % error)
        return 2
    import ray.cloudpickle

    if __name__ != "__main__":
        # Imported (not run as a script): send the actor class by value, so that the Ray
        # workers need this file's code only, not this module on their path.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # procs too: a job submitted with a working_dir does not hand the driver's sys.path (this
    # folder) to the workers, so they could not import trainspec_procs by name
    ray.cloudpickle.register_pickle_by_value(procs)
    driver = Driver(options)
    try:
        return driver.execute()
    except DriverError as error:
        _say("error: %s" % error)
        return 1
    except KeyboardInterrupt:
        _say("interrupted; stopping every process")
        return 130
    except _Interrupted as interrupted:
        _say("got signal %d; stopping every process" % interrupted.signum)
        return 128 + interrupted.signum
    finally:
        driver.cleanup()


if __name__ == "__main__":
    sys.exit(main())
