"""`check`'s memory of what specs compile to, trusting nothing but bytes.

A record says: the spec whose bytes hash to S, read with these other files (its extends chain,
the team catalog, the conda file: each by the sha256 of its bytes) and these facts on disk
(the code folder is a folder, a local input exists...) and the folders its job ships (by the
bytes of their files and the targets of their links, none followed: a Kubernetes ConfigMap
embeds them, and validation refuses a link there), from this place in the repository,
with these command-line options and this trainspec (its own source files, by hash, and the
versions of the libraries that shape its output), compiled without an error to these output
files (by path and sha256). `check` recompiles only the specs whose record does not match
every one of those facts today, or whose outputs on disk are not those hashes; for the others
it knows, from bytes alone, that they would compare equal. A spec with an error is never
recorded, so every message `check` prints comes from a real compile.

Records live in one file per (output folder, options, trainspec) under the user's cache folder:
$TRAINSPEC_CACHE_DIR, else $XDG_CACHE_HOME/trainspec, else ~/.cache/trainspec (an empty
TRAINSPEC_CACHE_DIR turns the cache off). Never under the output folder. A file that cannot be
read, parsed or written is ignored: the cache can make `check` faster, never different.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from trainspec import __version__
from trainspec.core.records import Record

ENV = "TRAINSPEC_CACHE_DIR"
FORMAT = 1
# the libraries whose behaviour is part of what a spec compiles to
_LIBRARIES = ("ruamel.yaml", "ruamel.yaml.clib", "pydantic-core", "pydantic", "jinja2")


def folder() -> Optional[Path]:
    """Where the cache lives, or None when it is turned off."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return Path(chosen).expanduser() if chosen else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "trainspec"


HASH_LIMIT = 256 * 1024 * 1024  # a file larger than this is never taken as unchanged


def sha256_file(path: Path) -> Optional[str]:
    """The sha256 of a regular file's bytes; None for anything else (missing, a FIFO or device,
    which are never opened, or larger than HASH_LIMIT), so that a lookup misses, never hangs."""
    from trainspec.schema.loader import ReadProblem, read_bounded

    try:
        data = read_bounded(path, HASH_LIMIT)
    except (OSError, ReadProblem):
        return None
    return hashlib.sha256(data).hexdigest() if len(data) <= HASH_LIMIT else None


def _read_json(file: Path) -> Any:
    """One of the cache's own files, read like any other input: bounded, never blocking."""
    from trainspec.schema.loader import ReadProblem, read_bounded

    try:
        data = read_bounded(file, HASH_LIMIT)
    except ReadProblem as exc:
        raise OSError(exc.message) from None
    return json.loads(data.decode("utf-8"))


@lru_cache(maxsize=1)
def _trainspec_identity() -> str:
    """trainspec itself, by the bytes of its source (an edited checkout is another trainspec),
    with Python's and its libraries' versions."""
    digest = hashlib.sha256(f"{FORMAT} {__version__} {sys.version}".encode())
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the whole trainspec package
    # os.walk and str paths: pathlib's rglob and sorting ~110 Paths were half of this (~14 ms)
    for folder, folders, names in os.walk(package):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        relative = os.path.relpath(folder, package).replace(os.sep, "/")
        for name in sorted(names):
            if name.endswith((".py", ".json")):
                digest.update((name if relative == "." else f"{relative}/{name}").encode() + b"\0")
                with open(os.path.join(folder, name), "rb") as source:
                    digest.update(source.read() + b"\0")
    digest.update(repr(_library_versions()).encode())
    return digest.hexdigest()


def _library_versions() -> List[Tuple[str, str]]:
    """The installed versions of _LIBRARIES, from their .dist-info folders on sys.path, first one
    wins as for imports (importlib.metadata would cost ~40 ms of imports at every start)."""
    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "_", name).lower()

    wanted = {norm(name) for name in _LIBRARIES}
    found: Dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[:-len(".dist-info")].partition("-")
                if norm(dist) in wanted:
                    found.setdefault(norm(dist), version)
    return sorted(found.items())


class Facts(Record):
    """The facts of the filesystem this run has looked at, each looked at once."""

    __slots__ = ("hashes", "kinds", "folders", "places")
    __hash__ = None  # type: ignore[assignment]  # filled in as the run looks

    def __init__(self, hashes: Optional[Dict[str, Optional[str]]] = None, kinds: Optional[Dict[str, str]] = None,
                 folders: Optional[Dict[str, Optional[str]]] = None,
                 places: Optional[Dict[str, Tuple[Optional[str], Optional[str]]]] = None) -> None:
        self.hashes = {} if hashes is None else hashes
        self.kinds = {} if kinds is None else kinds
        self.folders = {} if folders is None else folders
        self.places = {} if places is None else places

    def bytes_of(self, path: str) -> Optional[str]:
        if path not in self.hashes:
            self.hashes[path] = sha256_file(Path(path))
        return self.hashes[path]

    def folder(self, path: str) -> Optional[str]:
        """A shipped folder (code, build context, local input), by the names and bytes of its
        regular files and the names and targets of its links and special files, none followed:
        a link added to a code folder, or an edited file a Kubernetes ConfigMap embeds, is a new
        fact. None when it is not a folder."""
        if path not in self.folders:
            self.folders[path] = _folder_digest(Path(path))
        return self.folders[path]

    def kind(self, path: str) -> str:
        """dir, file, other or none (what validation asks of a path: is it a folder, a file, there)."""
        if path not in self.kinds:
            p = Path(path)
            self.kinds[path] = "dir" if p.is_dir() else "file" if p.is_file() else "other" if p.exists() else "none"
        return self.kinds[path]

    def place(self, spec_dir: str) -> Tuple[Optional[str], Optional[str]]:
        """(the team catalog a spec in spec_dir reads, the repository root it is named from):
        found by the same walks as validation (the nearest trainspec-skus.yaml up to the first
        folder with a .git; the first parent with a .git)."""
        if spec_dir not in self.places:
            from trainspec.schema.skus import team_file_for

            team = team_file_for(Path(spec_dir))
            root = next((str(p) for p in Path(spec_dir).parents if (p / ".git").exists()), None)
            self.places[spec_dir] = (str(team) if team else None, root)
        return self.places[spec_dir]


def _folder_digest(folder: Path) -> Optional[str]:
    from trainspec.core.files import SHIPPED_LIMIT, list_folder, read_regular

    if folder.is_symlink() or not folder.is_dir():
        return None
    listing = list_folder(folder, limit=SHIPPED_LIMIT)
    if listing.more:  # validation refuses it; no key, so never a stale answer either
        return None
    hashes = []
    for name in listing.files:
        try:
            data = read_regular(folder / name, HASH_LIMIT)
        except OSError:
            return None
        if len(data) > HASH_LIMIT:
            return None
        hashes.append(hashlib.sha256(data).digest())
    return _listing_digest(listing, hashes)


def _listing_digest(listing, hashes: Sequence[bytes]) -> str:
    """One digest of a folder's listing: each regular file by its name and the sha256 of its bytes
    (``hashes``, in the listing's order), each link and special file by its name and what it is."""
    digest = hashlib.sha256()
    for name, sha in zip(listing.files, hashes):
        digest.update(b"f\0" + name.encode("utf-8", "surrogateescape") + b"\0" + sha)
    for name, what in listing.links + listing.others:
        digest.update(b"l\0" + f"{name}\0{what}".encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


# A file last modified longer ago than this is taken as unchanged while its stat is (code_digest):
# a write changes the modification time, but only to the file system's clock tick (a nanosecond on
# ext4, two seconds on FAT), so a file written within a tick of being hashed is hashed again later.
SETTLED_NS = 2 * 10**9


def code_digest(folder: str) -> str:
    """The digest of the code folder a job ships, for the job's name (review/naming.py digest_of):
    its regular files by name and bytes, its links and special files by name and what they are,
    none followed (as check's cache keys a shipped folder).

    A code folder can hold tens of thousands of files that a hundred specs share, and the files
    rarely change between two runs: each file's sha256 is remembered in the cache folder (one
    record per code folder, beside check's) with what its stat said when it was read (device,
    inode, size, modification and change times, to the nanosecond), and a later run reads only
    the files whose stat is not that one. A file modified less than SETTLED_NS before it was read
    is not remembered; a record that cannot be read is no record (every file is read), and one
    that cannot be written is left as it was: the record can make this faster, never different."""
    import stat as stat_

    from trainspec.compiler.base import STAGING_FOLDER
    from trainspec.core.files import SHIPPED_LIMIT, hash_regular, list_folder

    # what a job ships of its code (compiler/base.py code_copy): never .git, nor trainspec's own
    # staging folder, which a code folder at the repository's top holds once a job was submitted
    # (counted, every submit would change the digest, so the job's name, and submit it again)
    listing = list_folder(Path(folder), skip=(".git", STAGING_FOLDER), limit=SHIPPED_LIMIT)
    record = _code_record(folder)
    known = _read_code_record(record, folder) if record is not None else {}
    kept: Dict[str, List[Any]] = {}
    hashes = []
    for name in listing.files:
        path = os.path.join(folder, name)
        try:
            now, seen = time.time_ns(), os.lstat(path)
        except OSError:
            hashes.append(b"?")  # gone since it was listed
            continue
        entry = known.get(name)
        if entry is not None and stat_.S_ISREG(seen.st_mode) and entry[:5] == _stat_key(seen):
            kept[name] = entry
            hashes.append(bytes.fromhex(entry[5]))
            continue
        try:
            status, sha = hash_regular(path)
        except OSError:
            hashes.append(b"?")  # unreadable, or no longer a regular file: as the job would not ship it
            continue
        if status.st_mtime_ns < now - SETTLED_NS:
            kept[name] = [*_stat_key(status), sha.hex()]
        hashes.append(sha)
    if record is not None and kept != known:
        _write(record, {"folder": folder, "files": kept})
    return _listing_digest(listing, hashes) + ("+" if listing.more else "")


def _stat_key(status: os.stat_result) -> List[int]:
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def _code_record(code: str) -> Optional[Path]:
    """Where code_digest remembers the files of the folder ``code`` (None: the cache is turned off)."""
    base = folder()
    if base is None:
        return None
    return base / f"code-{FORMAT}" / f"{hashlib.sha256(code.encode('utf-8', 'surrogateescape')).hexdigest()}.json"


def _read_code_record(record: Path, folder: str) -> Dict[str, List[Any]]:
    """The remembered files of ``folder``: name -> [device, inode, size, mtime_ns, ctime_ns, sha256];
    only entries of exactly that shape are trusted."""
    try:
        loaded = _read_json(record)
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(loaded, dict) or loaded.get("folder") != folder or not isinstance(loaded.get("files"), dict):
        return {}
    return {name: entry for name, entry in loaded["files"].items()
            if isinstance(entry, list) and len(entry) == 6 and all(type(n) is int for n in entry[:5])
            and isinstance(entry[5], str) and _HEX.fullmatch(entry[5])}


_HEX = re.compile(r"[0-9a-f]{64}")


def shipped(outcome) -> List[str]:
    """The folders a spec's job ships and validation lists (schema/validate.py _check_paths and
    _check_environment: the code, a build context, a local input folder), absolute."""
    from trainspec.core.fields import is_remote

    valid = outcome.valid
    spec = valid.spec
    paths = [valid.resolve(spec.code)]
    paths += [valid.resolve(item.path) for item in spec.inputs.values() if item.path is not None
              and not is_remote(item.path) and not item.path.startswith("/")]
    if spec.environment.build is not None:
        paths.append(valid.resolve(spec.environment.build.path))
    return [str(p) for p in paths if p.is_dir()]


def probes(outcome) -> List[str]:
    """The paths whose kind validation checks for a spec (schema/validate.py _check_paths and
    _check_environment; a target's local inputs), absolute."""
    from trainspec.core.fields import is_remote

    valid = outcome.valid
    spec = valid.spec
    paths = [valid.resolve(spec.code)]
    paths += [valid.resolve(item.path) for item in spec.inputs.values() if item.path is not None
              and not is_remote(item.path) and not item.path.startswith("/")]  # absolute: never asked
    build = spec.environment.build
    if build is not None:
        paths += [valid.resolve(build.path), valid.resolve(build.path) / build.dockerfile_path]
    return [str(p) for p in paths]


class Cache:
    """The records of one check run: loaded once, looked up per spec, saved once."""

    def __init__(self, out: Path, options: Dict[str, Any]):
        self.facts = Facts()
        self.records: Dict[str, Any] = {}
        self.changed = False
        self.file: Optional[Path] = None
        self.key = ""
        base = folder()
        if base is None:
            return
        try:
            key = json.dumps({"out": str(out.resolve()), "options": options, "trainspec": _trainspec_identity()},
                             sort_keys=True)
        except OSError:
            return
        name = hashlib.sha256(key.encode()).hexdigest()
        self.file = base / f"check-{FORMAT}" / f"{name}.json"
        try:
            loaded = _read_json(self.file)
            if isinstance(loaded, dict) and loaded.get("key") == key and isinstance(loaded.get("records"), dict):
                self.records = loaded["records"]
        except (OSError, ValueError, UnicodeDecodeError):
            pass  # no cache yet, or one that cannot be read: every spec is compiled
        self.key = key

    def lookup(self, file: str) -> Optional[Dict[str, Any]]:
        """The record of the spec in ``file`` when every fact it was made from still holds."""
        record = self.records.get(str(Path(file).resolve()))
        try:
            if record is None or record["spec"] != self.facts.bytes_of(str(Path(file).resolve())):
                return None
            spec_dir = str(Path(file).resolve().parent)
            if list(self.facts.place(spec_dir)) != record["place"]:
                return None
            if any(self.facts.bytes_of(path) != digest for path, digest in record["reads"]):
                return None
            if any(self.facts.kind(path) != kind for path, kind in record["kinds"]):
                return None
            if any(self.facts.folder(path) != digest for path, digest in record["folders"]):
                return None
            if not isinstance(record["display"], str) or not all(
                    isinstance(target, str) and isinstance(name, str) and isinstance(digest, str)
                    for target, files in record["outputs"].items() for name, digest in files.items()):
                return None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # a record of another shape: not trusted
        return record

    def remember(self, outcome, record: Optional[Tuple[str, Dict[str, Any]]] = None) -> None:
        """Record a spec that compiled without an error; ``record``: its record, made already
        (by check's worker process) with ``record_of``."""
        if self.file is None or not outcome.ok or outcome.valid is None:
            return
        record = record or self.record_of(outcome)
        if record is not None:
            self.records[record[0]] = record[1]
            self.changed = True

    def record_of(self, outcome) -> Optional[Tuple[str, Dict[str, Any]]]:
        """(the spec's resolved path, what remember() records for it) for an outcome without an
        error; None: a file it read cannot be hashed now, so nothing is recorded."""
        if self.file is None or not outcome.ok or outcome.valid is None:
            return None
        spec_path = str(Path(outcome.file).resolve())
        spec_digest = self.facts.bytes_of(spec_path)
        reads = [(str(p), self.facts.bytes_of(str(p))) for p in outcome.reads if str(p) != spec_path]
        if spec_digest is None or any(d is None for _, d in reads):
            return None
        return spec_path, {
            "spec": spec_digest,
            "place": list(self.facts.place(str(Path(spec_path).parent))),
            "reads": reads,
            "kinds": [(path, self.facts.kind(path)) for path in probes(outcome)],
            "folders": [(path, self.facts.folder(path)) for path in shipped(outcome)],
            "name": outcome.valid.name,
            "display": outcome.valid.source.display,
            "outputs": {a.target: {f.path: hashlib.sha256(f.data).hexdigest() for f in a.files}
                        for a in outcome.artifacts},
        }

    def save(self) -> None:
        """Write the records (atomically; a cache that cannot be written is left as it was)."""
        if self.file is not None and self.changed:
            _write(self.file, {"key": self.key, "records": self.records})


def _write(file: Path, data: Any) -> None:
    """Atomically; a cache that cannot be written is left as it was."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        # as tempfile.mkstemp makes it (a new name, O_EXCL, mode 0600), without importing tempfile
        temporary = file.parent / f".tmp-{os.urandom(6).hex()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(data))  # json.dump's text, from the C encoder (dump's is Python's)
            os.replace(temporary, file)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass


class Extends(dict):
    """What spec files name in `extends:`, by the sha256 of their bytes (build.find_specs and
    build.dependents parse a file only when its bytes are new): a fact of the bytes alone, so
    shared by every command and repository of one trainspec (its parser decides)."""

    LIMIT = 100_000  # entries; then it starts again

    def __init__(self) -> None:
        super().__init__()
        base = folder()
        self.file = None
        if base is not None:
            try:
                self.file = base / f"extends-{FORMAT}-{_trainspec_identity()[:16]}.json"
            except OSError:
                pass
        try:
            loaded = _read_json(self.file) if self.file is not None else {}
            if isinstance(loaded, dict) and len(loaded) < self.LIMIT and all(
                    isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in loaded.items()):
                self.update(loaded)
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        self.loaded = len(self)

    def save(self) -> None:
        if self.file is not None and len(self) != self.loaded:
            _write(self.file, dict(sorted(self.items())))  # whichever process of check parsed them


def outputs_match(folder: Path, expected: Dict[str, str]) -> bool:
    """The files in ``folder`` are exactly ``expected`` (relative path -> sha256), no more, each a
    regular file: a link (the folder, or anything in it) is never followed, and never matches."""
    from trainspec.core.files import list_folder, read_regular

    if os.path.islink(folder) or os.path.islink(folder.parent) or not folder.is_dir():
        return False
    listing = list_folder(folder, skip=())
    if listing.links or listing.others or set(listing.files) != set(expected):
        return False
    for name, digest in expected.items():
        try:
            data = read_regular(folder / name, HASH_LIMIT)
        except OSError:
            return False
        if len(data) > HASH_LIMIT or hashlib.sha256(data).hexdigest() != digest:
            return False
    return True


def options_of(targets: Sequence[str], sets: Iterable[str], variables: Iterable[str]) -> Dict[str, Any]:
    return {"targets": list(targets), "sets": list(sets), "vars": list(variables), "cwd": os.getcwd()}
