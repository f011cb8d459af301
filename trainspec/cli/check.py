"""`trainspec check`: CI gate: recompile in memory and fail (exit 1) for every output under OUT
that is stale (its spec changed), hand-edited, missing, orphaned (its spec is gone) or foreign
(not written by trainspec), each with the command that fixes it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from trainspec.cli.output import UsageError, _err, _report, _summary


def command(args: argparse.Namespace) -> int:
    from trainspec.registry.build import SearchError, build, claim_names, search
    from trainspec.compiler.write import links_in, out_problem
    from trainspec.review.cache import Cache, Extends, options_of
    from trainspec.review.check import KINDS, check_outputs, staging_problems

    out_path = Path(args.out)
    cache = Cache(out_path, options_of(args.targets, args.sets, args.variables))
    known = Extends()
    try:
        found, searched = search(args.paths)
    except SearchError as exc:
        raise UsageError(str(exc)) from None
    links = None if out_problem(out_path) is not None else dict(links_in(out_path))
    checker = _Checker(args, out_path, cache, known, set(searched), links)
    seen = _check_all(list(dict.fromkeys(found)), checker)
    # find_specs' rule: a file found in a folder that another found file extends is a base
    bases = checker.bases()
    files = [f for f in found if not (f in checker.walked and seen[f].real in bases)]
    if not files:
        raise UsageError(f"no spec files (*.yaml, *.yml) in {' '.join(args.paths)}")
    known.save()
    built = {f: seen[f].outcome for f in files if seen[f].outcome is not None}
    cached = {f: seen[f].record for f in files if seen[f].record is not None}  # what the cache proves equal
    # one job name, one spec: a cached spec that shares its name with another is compiled again,
    # so that the error is located like every other
    names = [r["name"] for r in cached.values()] + [o.valid.name for o in built.values() if o.valid is not None]
    for file, record in list(cached.items()):
        if names.count(record["name"]) > 1:
            del cached[file]
            built[file] = build(file, out_path, args.targets, sets=args.sets, variables=args.variables)
    outcomes = [built[f] for f in files if f in built]
    claim_names(outcomes)
    compared = {}  # output folder -> its findings, for the outcomes that kept their artifacts
    for file in (f for f in files if f in built):  # in the specs' order, as the outcomes
        outcome = built[file]
        mine = outcome is seen[file].outcome
        cache.remember(outcome, seen[file].remembered if mine else None)
        if mine and outcome.artifacts:
            compared.update(seen[file].compared)
    cache.save()
    verified = {}  # output folder -> its spec
    for record in cached.values():
        verified.update(dict.fromkeys((out_path / record["name"] / target for target in record["outputs"]),
                                      record["display"]))
    errors, warnings = _report([o for o in outcomes if not o.ok], False)
    if errors:
        _err(_summary(len(files), errors, warnings) + "; fix the specs first")
        return 1
    findings = check_outputs(outcomes, out_path, _fix_command(args), args.targets, verified, compared, links)
    findings += staging_problems()  # a committed .trainspec/ (what submit compiles into) is no output of a spec
    for finding in findings:
        print(finding.render())
    count = sum(len(o.artifacts) for o in outcomes) + len(verified)
    if findings:
        kinds = ", ".join(f"{n} {k}" for k in KINDS for n in [sum(f.kind == k for f in findings)] if n)
        fixes = list(dict.fromkeys(f.fix for f in findings))
        _err(f"trainspec check: {len(findings)} problem(s) in {args.out} ({kinds}); to fix them all, run:")
        for line in fixes:
            _err(f"  {line}")
        return 1
    _err(f"trainspec check: {count} output folder(s) in {args.out} match their specs")
    return 0


class _Seen:
    """One file the search found, as the process that checked it saw it: what it extends, and
    either the cache's record (its outputs proved equal from bytes alone) or its compile with
    what follows from it (the cache's record of it, its outputs compared with the files)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.real: Optional[Path] = None  # its resolved path (files found in a folder)
        self.base: Optional[Path] = None  # the resolved file it extends (files found in a folder)
        self.record: Optional[Dict[str, Any]] = None
        self.outcome: Any = None  # build.Outcome
        self.remembered: Optional[Tuple[str, Dict[str, Any]]] = None  # Cache.record_of
        self.compared: Dict[Path, list] = {}


class _Checker:
    """The work check does per file, the same in either process: look (what it extends), then
    check (the cache, or a compile compared with OUT). Its bases are left out when its own looks
    show them; the process that merges leaves out those that only the other process saw."""

    def __init__(self, args: argparse.Namespace, out: Path, cache: Any, known: Dict[str, Optional[str]],
                 walked: Set[str], links: Optional[Dict[Path, str]]) -> None:
        self.args, self.out, self.cache, self.known, self.walked, self.links = args, out, cache, known, walked, links
        self.seen: Dict[str, _Seen] = {}

    def look(self, file: str) -> _Seen:
        from trainspec.registry.build import _real, base_of

        if file not in self.seen:
            seen = self.seen[file] = _Seen(file)
            if file in self.walked:
                seen.base = base_of(file, self.known)
                seen.real = _real(file)
        return self.seen[file]

    def bases(self) -> Set[Path]:
        return {s.base for s in self.seen.values() if s.base is not None}

    def check(self, file: str, bases: Set[Path]) -> None:
        """``file``, looked at already, unless it is one of ``bases``."""
        from trainspec.registry.build import build
        from trainspec.review.cache import outputs_match
        from trainspec.review.check import compare

        seen = self.seen[file]
        if file in self.walked and seen.real in bases:
            return
        record = self.cache.lookup(file)
        if record is not None:
            folders = {self.out / record["name"] / target: hashes for target, hashes in record["outputs"].items()}
            if all(outputs_match(folder, hashes) for folder, hashes in folders.items()):
                seen.record = record
                return
        args = self.args
        seen.outcome = build(file, self.out, args.targets, sets=args.sets, variables=args.variables)
        seen.remembered = self.cache.record_of(seen.outcome)
        seen.compared = compare(seen.outcome, self.out, _fix_command(args), self.links)

    def run(self, files: List[str]) -> Dict[str, _Seen]:
        for file in files:
            self.look(file)
        bases = self.bases()
        for file in files:
            self.check(file, bases)
        return {file: self.seen[file] for file in files}


FORK_FROM = 64  # files from which check shares them with a second process
CHUNK = 8  # files the two processes take at a time


def _check_all(files: List[str], checker: _Checker) -> Dict[str, _Seen]:
    """``checker``'s look and check of every one of ``files`` (no two alike). With FORK_FROM
    files or more and a free core (``_free_core``), a forked worker shares them with this process: each takes
    CHUNK files at a time from a pipe of tickets until none are left (so a process slowed by
    the machine's other work takes fewer), and the worker sends its results back pickled (with
    the `extends` values it parsed, for check's cache). A worker that fails (killed, or raising)
    is reported on stderr and the files it took are checked here, so the result is the one a
    single process gives."""
    if len(files) < FORK_FROM or not _free_core():
        return checker.run(files)
    import pickle  # only for the worker's results

    # what every spec needs (the validator, the targets' modules) is made once, before the fork,
    # by checking the first file that extends another (the first file may be a base)
    first = next((f for f in files if checker.look(f).base is not None), files[0])
    checker.check(first, checker.bases())
    rest = [f for f in files if f != first]
    size = max(CHUNK, -(-len(rest) // 1000))  # at most 1000 tickets of 2 bytes: one write to a pipe
    chunks = [rest[i:i + size] for i in range(0, len(rest), size)]
    tickets, writer = os.pipe()
    # a read of 2 bytes takes one ticket whole, whichever process reads; the last chunk is the
    # worker's from the start
    os.write(writer, b"".join(i.to_bytes(2, "big") for i in range(len(chunks) - 1)))
    os.close(writer)

    def taken() -> Iterable[List[str]]:
        while True:
            ticket = os.read(tickets, 2)
            if not ticket:
                return
            yield chunks[int.from_bytes(ticket, "big")]

    known = set(checker.known)
    sys.stdout.flush()
    sys.stderr.flush()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: check, send, and leave without running the parent's exit handlers
        status = 1
        try:
            os.close(reader)
            theirs = checker.run(chunks[-1])
            for chunk in taken():
                theirs.update(checker.run(chunk))
            _one_copy(theirs.values())
            parsed = {digest: parent for digest, parent in checker.known.items() if digest not in known}
            with os.fdopen(writer, "wb") as pipe:
                pickle.dump((theirs, parsed), pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    reaped = False
    try:
        mine = {first}
        for chunk in taken():
            mine.update(checker.run(chunk))
        with os.fdopen(reader, "rb", closefd=False) as pipe:
            sent = pipe.read()  # until the worker exits: its end closes with it
        _, status = os.waitpid(pid, 0)
        reaped = True
        if status == 0:
            theirs, parsed = pickle.loads(sent)
            checker.seen.update(theirs)
            checker.known.update(parsed)
        else:
            left = [f for f in rest if f not in mine]
            _err(f"trainspec check: the worker process failed ({_how(status)}); checking the "
                 f"{len(left)} file(s) it took here")
            checker.run(left)
        return checker.seen
    finally:
        os.close(reader)
        os.close(tickets)
        if not reaped:  # this process is failing (an error, ^C): the worker ends with it
            import signal

            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _free_core() -> bool:
    """Whether a second process would run beside this one: a system that forks, two cores or
    more that this process may use, and (where the system says) a 1-minute load average that
    leaves one of them free. On a machine busy with other work, a second process costs more CPU
    than it saves wall time (docs/speed.md, "Check on both cores")."""
    if not hasattr(os, "fork"):
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0  # not known: the cores decide
    return cores >= 2 and load <= cores - 1


def _one_copy(seen: Iterable[_Seen]) -> None:
    """Output files with the same bytes (every job's copy of the shim) hold one bytes object, so
    that the worker's pickle carries them once (500 shims: 22 MB to send and copy, otherwise)."""
    from trainspec.core.records import replace

    first: Dict[bytes, bytes] = {}
    for item in seen:
        if item.outcome is not None:
            item.outcome.artifacts = [replace(a, files=tuple(replace(f, data=first.setdefault(f.data, f.data))
                                                             for f in a.files)) for a in item.outcome.artifacts]


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _fix_command(args: argparse.Namespace) -> Callable[[Optional[Sequence[str]], bool], str]:
    """The compile command line that fixes a check finding: the same output folder, targets and
    overrides as the check that found it; ``files`` None means the paths the check was given."""
    def command(files: Optional[Sequence[str]], prune: bool) -> str:
        words = ["trainspec", "compile", *(args.paths if files is None else files), "-o", args.out]
        for name in args.targets:
            words += ["-t", name]
        for text in args.sets:
            words += ["--set", text]
        for text in args.variables:
            words += ["--var", text]
        return shlex.join(words + (["--prune"] if prune else []))
    return command
