"""The two sides of a review: the specs of the working tree and of a git revision, each compiled
from its own root with the same repository-relative names (a revision's files are extracted
with `git archive`, but for the folders git says are the same in the working tree: Sparse), so
messages name `REV:specs/x.yaml`, never a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Union

from trainspec.registry.build import Outcome, build, find_specs
from trainspec.core.diagnostics import Diagnostic
from trainspec.review.diff import JobDiff, OutputDiff, diff_outcomes


# --- two sides: the working tree and a revision -----------------------------------------------

@dataclass
class Side:
    """A set of specs compiled from one tree: by job name, plus every error found (and, by spec
    path, the specs that did not compile, for the base side of a review)."""

    jobs: Dict[str, Outcome] = field(default_factory=dict)
    errors: List[Diagnostic] = field(default_factory=list)
    invalid: Dict[str, List[Diagnostic]] = field(default_factory=dict)
    # by job name, the team catalog (trainspec-skus.yaml) of its tree: its region and prices price
    # the job (review/cost.py), read while the tree (a revision's, removed after) is there
    catalogs: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalogs:
    """The team catalogs (trainspec-skus.yaml: prices, region, size map) of one job of the pull
    request: the base revision's, at the spec's place in the base's tree, which prices both sides
    of the review (a pull request cannot make its own change look cheap by editing or shadowing
    the catalog), and its own; each file repository-relative (None: no team file applies)."""

    base: Any
    head: Any
    base_file: Optional[str]
    head_file: Optional[str]


def catalogs_at(tree: Path, root: Path, head: Side) -> Dict[str, Catalogs]:
    """By job name, the base's catalog (read in ``tree``, the base revision's) and the head's
    (``head.catalogs``, read in the working tree ``root``) of every job of ``head``."""
    from trainspec.schema.skus import catalog_for

    def relative(catalog: Any, folder: Path) -> Optional[str]:
        if catalog.team_file is None:
            return None
        try:
            return Path(os.path.realpath(catalog.team_file)).relative_to(os.path.realpath(folder)).as_posix()
        except ValueError:
            return catalog.team_file.name
    found = {}
    for name, outcome in head.jobs.items():
        base = catalog_for(tree / Path(outcome.file).parent)[0]
        own = head.catalogs.get(name) or catalog_for(outcome.valid.source.dir)[0]
        found[name] = Catalogs(base, own, relative(base, tree), relative(own, root))
    return found


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@contextmanager
def revision_tree(rev: str, root: Path, named: Sequence[str] = ()) -> Iterator[Path]:
    """The tree of ``rev`` extracted into a temporary folder (removed afterwards); it has a
    .git marker so spec paths are repository-relative there too. Only what stays inside the
    folder is extracted: a symlink that is absolute or leaves the tree (``tz ->
    /usr/share/zoneinfo/UTC``) is left out, so a spec that reads through it finds nothing there
    and says so, located, instead of reading this machine's files.

    A folder that is the same at ``rev`` and in the working tree (Sparse: by git's tree ids, and
    nothing in the working tree differs from HEAD there), holds no YAML file and none of the
    ``named`` paths (repository-relative: what the command searches for specs) is left out too:
    a 50,000-file code folder a hundred specs share is neither written nor hashed for the base
    side; a base compile that reads it after all has it extracted first (Sparse.fill)."""
    import tempfile

    git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=root)
    files = subprocess.run(["git", "ls-tree", "--name-only", rev], cwd=root, check=True, capture_output=True).stdout
    tree = Path(tempfile.mkdtemp(prefix="trainspec-rev-"))
    try:
        if files:  # git archive of a tree without files is no tar at all
            sparse = Sparse.of(rev, root, tree, named)
            _SPARSE[str(tree)] = sparse
            sparse.extract(sparse.kept())
        (tree / ".git").mkdir(exist_ok=True)
        yield tree
    finally:
        _SPARSE.pop(str(tree), None)
        shutil.rmtree(tree, ignore_errors=True)


_SPARSE: Dict[str, "Sparse"] = {}  # by revision tree (its temporary folder), while it is there


def sparse_of(tree: Path) -> Optional["Sparse"]:
    """What revision_tree left out of ``tree`` (None: not a revision tree, or nothing left out)."""
    return _SPARSE.get(str(tree))


_ARCHIVE_BATCH = 1000  # paths per git archive command line


class Sparse:
    """A revision's tree as revision_tree extracts it: by repository-relative folder, git's tree
    ids at the revision (``base``) and at HEAD (``head``); the folders whose working tree is not
    HEAD's (``dirty``: a modified, untracked, ignored, assume-unchanged or skip-worktree path, a
    submodule); and ``omitted``: the folders not extracted, each the same in the working tree as
    at the revision (same tree id, not dirty), with no YAML file (a spec, a base, a catalog) and
    none of the named paths in it. Nothing is read from the revision but through git archive
    (_extract's rules), and git is asked only for listings (ls-tree, status, ls-files)."""

    def __init__(self, rev: str, root: Path, tree: Path, base: Dict[str, str], head: Dict[str, str],
                 dirty: tuple, omitted: Dict[str, str], children: Dict[str, List[str]]):
        self.rev, self.root, self.tree = rev, root, tree
        self.base, self.head, self.omitted, self.children = base, head, omitted, children
        self.dirty, self.reported = dirty  # folders holding a path git reports; the paths themselves

    @classmethod
    def of(cls, rev: str, root: Path, tree: Path, named: Sequence[str]) -> "Sparse":
        entries = _ls_tree(rev, root)
        base = {path: oid for kind, oid, path in entries if kind == "tree"}
        base[""] = git("rev-parse", f"{rev}^{{tree}}", cwd=root).strip()
        try:
            head = {path: oid for kind, oid, path in _ls_tree("HEAD", root, folders_only=True)}
            head[""] = git("rev-parse", "HEAD^{tree}", cwd=root).strip()
            dirty = _dirty(root)
        except subprocess.CalledProcessError:  # no HEAD yet: nothing is known to be the same
            head, dirty = {}, ({""}, {""})
        children: Dict[str, List[str]] = {}
        keep: Set[str] = {""}  # folders that hold a YAML file or a submodule at the revision
        for kind, _, path in entries:
            children.setdefault(_parent(path), []).append(path)
            if kind == "commit" or (kind == "blob" and path.lower().endswith((".yaml", ".yml"))):
                keep.update(_ancestors(path))
        named = [n.strip("/") for n in named if n not in ("", ".")]
        omitted: Dict[str, str] = {}
        found = cls(rev, root, tree, base, head, dirty, omitted, children)
        for folder in sorted(base, key=lambda f: (f.count("/"), f)):
            if folder in keep or not found.same(folder) \
                    or any(a in omitted for a in _ancestors(folder)) \
                    or any(n == folder or n.startswith(folder + "/") for n in named):
                continue
            omitted[folder] = base[folder]
        return found

    def kept(self) -> List[str]:
        """The fewest paths that name everything but the omitted folders ([""]: everything)."""
        if not self.omitted:
            return [""]
        partial = {a for folder in self.omitted for a in _ancestors(folder)}
        found: List[str] = []
        pending = [""]
        while pending:
            for child in self.children.get(pending.pop(), []):
                if child in partial:
                    pending.append(child)
                elif child not in self.omitted:
                    found.append(child)
        return sorted(found)

    def extract(self, paths: Sequence[str]) -> None:
        for start in range(0, len(paths), _ARCHIVE_BATCH):
            batch = list(paths[start:start + _ARCHIVE_BATCH])
            # tar.umask 0022: files 0644 or 0755, the modes the data filter leaves (_extract)
            command = ["git", "--literal-pathspecs", "-c", "tar.umask=0022", "archive", "--format=tar", self.rev]
            if batch != [""]:
                command += ["--", *batch]
            _extract(subprocess.run(command, cwd=self.root, check=True, capture_output=True).stdout, self.tree)

    def inside(self, rel: str) -> Optional[str]:
        """The omitted folder ``rel`` (repository-relative) is, or lies in (None: extracted)."""
        rel = "" if rel in ("", ".") else rel
        return next((a for a in (rel, *_ancestors(rel)) if a in self.omitted), None)

    def same(self, rel: str) -> Optional[bool]:
        """Whether the folder ``rel`` holds the same at the revision and in the working tree, by
        git's tree ids, when the working tree there is HEAD's (None: git cannot tell; a folder
        that differs only in a file's mode is said to differ: compiled again, never wrongly equal)."""
        if rel in self.dirty or rel not in self.head or any(a in self.reported for a in (rel, *_ancestors(rel))):
            return None
        return self.base.get(rel) == self.head[rel]

    def touches(self, outcome: Outcome) -> List[str]:
        """The omitted folders a base compile may have read: overlapping a path its job reads,
        ships or asks about; all of them for a spec with an error (its paths are not known)."""
        from trainspec.review.cache import probes, shipped

        if not self.omitted:
            return []
        if not outcome.ok or outcome.valid is None:
            return sorted(self.omitted)
        top = os.path.realpath(self.tree)
        found = set()
        for path in [*probes(outcome), *shipped(outcome), *map(str, outcome.reads)]:
            for where in {os.path.abspath(path), os.path.realpath(path)}:
                rel = os.path.relpath(where, top)
                if rel != ".." and not rel.startswith("../"):
                    rel = "" if rel == "." else Path(rel).as_posix()
                    found.update(f for f in self.omitted if not rel or f == rel
                                 or f.startswith(rel + "/") or rel.startswith(f + "/"))
        return sorted(found)

    def fill(self, folders: Sequence[str]) -> None:
        """Extract omitted ``folders`` after all (a base compile reads them)."""
        self.extract(sorted(folders))
        for folder in folders:
            self.omitted.pop(folder, None)


def _ls_tree(rev: str, root: Path, folders_only: bool = False) -> List[tuple]:
    """(type, object id, path) of every entry of ``rev``'s tree (-t: folders too)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "-z", "--full-tree", "-d" if folders_only else "-t", rev],
                             cwd=root, check=True, capture_output=True).stdout
    found = []
    for record in listing.split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            _, kind, oid = meta.decode().split()
            found.append((kind, oid, path.decode("utf-8", "surrogateescape")))
    return found


def _dirty(root: Path) -> tuple:
    """(the folders holding a path where the working tree is not HEAD's, those paths): a changed,
    untracked or ignored path (git status: an ignored or untracked folder is one path), an index
    entry git does not compare (assume-unchanged, skip-worktree: git ls-files -v)."""
    status = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--no-renames", "--ignored=matching",
                             "--untracked-files=all"], cwd=root, check=True, capture_output=True).stdout
    reported = set()
    for record in status.split(b"\0"):
        if record:
            reported.add(record[3:].decode("utf-8", "surrogateescape").rstrip("/"))
    flags = subprocess.run(["git", "ls-files", "-v", "-z"], cwd=root, check=True, capture_output=True).stdout
    for record in flags.split(b"\0"):
        if record and record[:2] != b"H ":
            reported.add(record[2:].decode("utf-8", "surrogateescape"))
    return {a for path in reported for a in _ancestors(path)}, reported


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _ancestors(path: str) -> List[str]:
    """The folders above ``path``, nearest first, down to the repository's ("")."""
    found = []
    while path:
        path = _parent(path)
        found.append(path)
    return found


def _extract(archive: bytes, tree: Path) -> None:
    """Extract a git archive of the (untrusted) base revision into ``tree``: only the members
    _stays_inside accepts, each as the data filter leaves it (_skip_unsafe). Folders are made
    here, the regular files are written by GNU tar (a C loop: creating 50,000 files through
    tarfile cost a minute) from an archive of just those files, and the symlinks are made last,
    through tarfile and the data filter as before: while tar runs, no link it could write through
    is in the tree (_by_tar says when one is, from an earlier archive, or a file's mode is not
    what the filter leaves: then tarfile does it all, as it did before)."""
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [m for m in tar.getmembers() if _stays_inside(m)]
        if not hasattr(tarfile, "data_filter"):  # Python without extraction filters: _stays_inside did the same checks
            tar.extractall(tree, members=members)
            return
        if not _by_tar(members, tree):
            tar.extractall(tree, members=members, filter=_skip_unsafe)
            return
        for member in members:
            if member.isdir():
                os.makedirs(tree / member.name, exist_ok=True)  # the system's default mode, as the filter leaves it
        files = [m for m in members if m.isfile()]
        if files:
            chunks = [archive[m.offset:m.offset_data + -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE] for m in files]
            # LC_ALL=C: names as the archive's bytes, never converted to another locale's charset
            subprocess.run(["tar", "-x", "-f", "-", "-C", str(tree), "--no-same-owner", "--same-permissions"],
                           input=b"".join([*chunks, bytes(2 * tarfile.BLOCKSIZE)]), check=True, capture_output=True,
                           env=dict(os.environ, LC_ALL="C"))
        tar.extractall(tree, members=[m for m in members if m.issym()], filter=_skip_unsafe)


def _by_tar(members: Sequence[Any], tree: Path) -> bool:
    """Whether GNU tar may write the regular files of ``members`` (_stays_inside's) into ``tree``
    exactly as tarfile's data filter would: tar is on PATH (Debian has it; without it, tarfile),
    every file's mode is 0644 or 0755 (git archive's under tar.umask 0022, which the filter keeps;
    git stores no other), every name is normalized (git's are), and no member nor folder above one
    is a link already in the tree (from an earlier archive of the same revision, which never holds
    one there): nothing is written through a link, so each path is lexically where its name says,
    inside the tree."""
    import posixpath
    import stat

    if shutil.which("tar") is None or any(m.isfile() and m.mode not in (0o644, 0o755) for m in members):
        return False
    paths = set()
    for member in members:
        if member.name != posixpath.normpath(member.name) or member.name == ".":  # a/../b, ./a: tar and tarfile differ
            return False
        paths.add(member.name)
        paths.update(_ancestors(member.name))
    paths.discard("")
    for path in paths:
        try:
            if stat.S_ISLNK(os.lstat(tree / path).st_mode):
                return False
        except (FileNotFoundError, NotADirectoryError):
            pass
    return True


def _stays_inside(member: Any) -> bool:
    """A git archive member that is a file, a folder, or a symlink whose target is inside the tree."""
    import posixpath

    name = posixpath.normpath(member.name)
    if name.startswith(("/", "../")) or name == ".." or "\0" in member.name:
        return False
    if member.issym():
        link = member.linkname
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        return not (link.startswith("/") or target == ".." or target.startswith("../"))
    return member.isfile() or member.isdir()


def _skip_unsafe(member: Any, dest: str) -> Any:
    import tarfile

    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None  # left out, like a symlink that leaves the tree


@contextmanager
def working_in(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def looks_like_spec(path: Path) -> bool:
    """A trainspec spec (`version: 1` or `extends:` at the top level), not any YAML file."""
    from trainspec.schema.loader import ReadProblem, read_bounded

    try:
        head = read_bounded(path, 8000)[:8000].decode("utf-8", "replace")
    except (OSError, ReadProblem):
        return False
    return any(re.match(r"(version:\s*1\s*(#.*)?$|extends:)", line) for line in head.splitlines())


def spec_files(root: Path, paths: Sequence[str], extends: Optional[Dict[str, Optional[str]]] = None) -> List[str]:
    """The spec files under ``paths`` (repository-relative) in the tree ``root``, as found from
    there (``extends``: what files extend, by their bytes, shared by both sides: cache.Extends)."""
    with working_in(root):
        present = [p for p in paths if Path(p).exists()]
        return [f for f in find_specs(present, extends) if looks_like_spec(Path(f))] if present else []


def compile_side(root: Path, paths: Sequence[str], out: str, label: Optional[str],
                 established: Sequence[str] = (), extends: Optional[Dict[str, Optional[str]]] = None,
                 same: Optional["Unchanged"] = None, **options: Any) -> Side:
    """Every spec under ``paths`` (repository-relative) compiled from ``root``; diagnostics name
    ``label:path`` (a revision) or the path. A job name belongs to the first spec that uses it,
    the ``established`` ones (the specs of the base revision) first: a copy that kept its
    original's name is the one that gets the error. ``same``: the other side's outcomes, taken
    (a copy) for a spec whose every input is the same here, instead of compiling it again."""
    from contextlib import ExitStack

    from trainspec.registry.build import claim_names
    from trainspec.core.memo import one_command
    from trainspec.schema.skus import catalog_for

    side = Side()
    known = {Path(f).as_posix() for f in established}
    files = spec_files(root, paths, extends)
    sparse = sparse_of(root)
    with working_in(root), ExitStack() as fresh:
        files.sort(key=lambda f: (Path(f).as_posix() not in known, f))
        outcomes, taken = [], {}  # id of a copy -> its spec here
        for file in files:
            copy = same.outcome(file, extends) if same is not None else None
            if copy is not None:
                taken[id(copy)] = Path(os.path.abspath(file))
                outcomes.append(copy)
                continue
            outcome = build(file, Path(out), **options)
            touched = sparse.touches(outcome) if sparse is not None else []
            if touched:  # it reads a folder revision_tree left out: extracted, and compiled again
                sparse.fill(touched)
                fresh.enter_context(one_command())  # what was asked of the tree before is stale now
                outcome = build(file, Path(out), **options)
            outcomes.append(outcome)
        claim_names(outcomes)
        for outcome in outcomes:
            if label:
                outcome.diagnostics = [_relabel(d, label) for d in outcome.diagnostics]
            errors = [d for d in outcome.diagnostics if d.is_error]
            side.errors += errors
            if errors:
                side.invalid[Path(outcome.file).as_posix()] = errors
            elif outcome.valid is not None:
                side.jobs[outcome.valid.name] = outcome
                # the catalog of this tree: a copy's spec (Unchanged) lies in the other tree, and
                # this tree is gone once the side is compiled
                spec_dir = taken[id(outcome)].parent if id(outcome) in taken else outcome.valid.source.dir
                side.catalogs[outcome.valid.name] = catalog_for(spec_dir)[0]
    return side


class Unchanged:
    """The working tree's outcomes that hold at the base revision too: a spec whose bytes, extends
    chain (file by file, as `extends` names them), team catalog, conda file, the kinds of the
    paths validation looks at, the folders its job ships (cache.Facts: names and bytes, links
    never followed) and where its outputs land are the same in both trees compiles to the same
    job in both, so the base side takes a copy instead of compiling it (the check cache's rule,
    review/cache.py, with the whole chain). Any path through a link, outside the repository or
    unreadable on either side: compiled, as before."""

    def __init__(self, head: Side, root: Path, tree: Path, out: str):
        from trainspec.review.cache import Facts

        self.by_file = {Path(o.file).as_posix(): o for o in head.jobs.values()}
        self.roots = (Path(os.path.realpath(root)), Path(os.path.realpath(tree)))
        self.facts = (Facts(), Facts())
        self.out = out
        self.sparse = sparse_of(tree)

    def outcome(self, file: str, extends: Optional[Dict[str, Optional[str]]] = None) -> Optional[Outcome]:
        """A copy of the head side's outcome of ``file`` (repository-relative) when it holds here."""
        from trainspec.core.records import replace

        head = self.by_file.get(Path(file).as_posix())
        if head is None or head.valid is None or not head.ok or not self._holds(file, head, extends or {}):
            return None
        return replace(head, diagnostics=list(head.diagnostics), artifacts=list(head.artifacts))

    def _holds(self, file: str, head: Outcome, extends: Dict[str, Optional[str]]) -> bool:
        from trainspec.review.cache import probes, shipped

        chains = [self._chain(root, file, extends) for root in self.roots]
        if chains[0] is None or chains[0] != chains[1]:
            return False
        valid = head.valid
        conda = valid.spec.environment.conda_file
        files = [*chains[0], *self._inside([valid.resolve(conda)] if conda else [])]
        places = [self._place(k, Path(file).parent) for k in (0, 1)]
        # a path outside the repository in a valid spec is an absolute one, the cluster's storage:
        # never read, and the same path for both trees
        kinds = [rel for rel in self._inside([Path(p) for p in probes(head)]) if rel is not None]
        folders = self._inside([Path(p) for p in shipped(head)])
        landings = [[self._landing(k, valid.name, a.target) for a in head.artifacts] for k in (0, 1)]
        if None in files or places[0] is None or places[0] != places[1] or None in folders \
                or landings[0] != landings[1]:
            return False
        if places[0][0] is not None:
            files.append(places[0][0])
        return all(self._same(k, rel) for k in (0, 1) for rel in files) \
            and all(self._file(0, rel) == self._file(1, rel) for rel in files) \
            and all(self._kind(0, rel) == self._kind(1, rel) for rel in kinds) \
            and all(self._folder(0, rel) == self._folder(1, rel) for rel in folders)

    def _chain(self, root: Path, file: str, extends: Dict[str, Optional[str]]) -> Optional[List[str]]:
        """The spec and its bases as `extends` names them, repository-relative, read in ``root``."""
        from trainspec.registry.build import extends_of

        chain, current = [], file
        with working_in(root):
            while len(chain) <= 16:  # compose's own limit
                rel = os.path.normpath(current)
                if rel.startswith(("..", "/")):
                    return None
                chain.append(Path(rel).as_posix())
                parent = extends_of(current, extends)
                if parent is None:
                    return chain
                current = os.path.join(os.path.dirname(current), parent)
        return None

    def _inside(self, paths: Sequence[Path]) -> List[Optional[str]]:
        """Absolute paths of the working tree, repository-relative (None: outside it)."""
        found: List[Optional[str]] = []
        for path in paths:
            try:
                found.append(Path(os.path.abspath(path)).relative_to(self.roots[0]).as_posix())
            except ValueError:
                found.append(None)
        return found

    def _place(self, k: int, spec_dir: Path) -> Optional[tuple]:
        """(the team catalog a spec in spec_dir reads, the repository root), repository-relative."""
        team, root = self.facts[k].place(str(self.roots[k] / spec_dir))
        if root is None or Path(root) != self.roots[k]:
            return None
        if team is None:
            return (None, ".")
        try:
            return (Path(team).relative_to(self.roots[k]).as_posix(), ".")
        except ValueError:
            return None

    def _landing(self, k: int, name: str, target: str) -> Optional[str]:
        where = Path(os.path.realpath(self.roots[k] / self.out / name / target))
        try:
            return where.relative_to(self.roots[k]).as_posix()
        except ValueError:
            return None

    def _left_out(self, k: int, rel: str) -> bool:
        """``rel`` lies in a folder revision_tree left out of the base's tree (``k`` 1): the same
        in the working tree, so asked there (tree 0)."""
        return k == 1 and self.sparse is not None and self.sparse.inside(rel) is not None

    def _same(self, k: int, rel: str) -> bool:
        """``rel`` is reached in tree ``k`` through no link (lexically where it is)."""
        if self._left_out(k, rel):
            return self._same(0, rel)
        path = self.roots[k] / rel
        return os.path.realpath(path) == str(path)

    def _file(self, k: int, rel: str) -> Optional[str]:
        if self._left_out(k, rel):
            return self._file(0, rel)
        digest = self.facts[k].bytes_of(str(self.roots[k] / rel))
        return digest if digest is not None else f"unreadable in tree {k}"  # never equal across trees

    def _kind(self, k: int, rel: str) -> str:
        if self._left_out(k, rel):
            return self._kind(0, rel)
        return self.facts[k].kind(str(self.roots[k] / rel)) if self._same(k, rel) else f"through a link in tree {k}"

    def _folder(self, k: int, rel: str) -> Optional[str]:
        """The folder by its files' names and bytes (cache.Facts.folder); where git's tree ids tell
        whether it is the same in both trees (Sparse.same), that, and no file is read."""
        if not self._same(k, rel):
            return f"not a plain folder in tree {k}"
        known = self.sparse.same(rel if rel != "." else "") if self.sparse is not None else None
        if known is not None:  # a folder left out of the base's tree is always known the same
            return "the same in both trees (git)" if known else f"differs in tree {k} (git)"
        digest = self.facts[k].folder(str(self.roots[k] / rel))
        return digest if digest is not None else f"not a plain folder in tree {k}"


def _relabel(diagnostic: Diagnostic, label: str) -> Diagnostic:
    from trainspec.core.records import replace

    if diagnostic.file and not diagnostic.file.startswith("--"):
        return replace(diagnostic, file=f"{label}:{Path(diagnostic.file).as_posix()}")
    return diagnostic


def compare(old: Side, new: Side, out: str, changed_files: Sequence[str] = (), root: Optional[Path] = None) -> List[JobDiff]:
    """Every job whose compiled job changes between the sides, by job name: its outputs' bytes
    (the provenance header aside), a file it references rather than copies (a conda file), the
    code folder it uploads, or a committed output that is not what its spec compiles to (all from
    ``changed_files``, repository-relative; with ``root``, the working tree's repository)."""
    diffs = []
    changed = set(changed_files)
    for name in sorted(set(old.jobs) | set(new.jobs)):
        before, head = old.jobs.get(name), new.jobs.get(name)
        base_errors = old.invalid.get(head.valid.source.display) if head is not None and before is None else None
        result = diff_outcomes(before, head, out)
        if base_errors:
            result.status, result.base_errors = "changed", [d.render() for d in base_errors]
        if head is not None and root is not None:
            result.reads = [r for r in _relative(referenced(head), root) if r in changed]
            result.code = [f for f in _code_changes(head, root, changed) if f not in result.reads]
            result.edits = _edited_outputs(head, root, out, changed)
            result.edited = [e.path for e in result.edits]
        if result.files or result.base_errors or (result.status != "removed" and result.reasons):
            if result.status == "unchanged":
                result.status = "changed"
            diffs.append(result)
    return diffs


def referenced(outcome: Outcome) -> List[Path]:
    """Files a compiled job names but does not contain: their content reaches the job when it is
    submitted (Azure ML uploads a conda file), so a change to them changes the job."""
    conda = outcome.valid.spec.environment.conda_file
    return [outcome.valid.resolve(conda)] if conda else []


def _code_changes(outcome: Outcome, root: Path, changed: set) -> List[str]:
    """The changed files inside the code folder the job uploads (repository-relative)."""
    code = outcome.valid.spec.code
    if not code:
        return []
    folder = _relative([outcome.valid.resolve(code)], root)
    if not folder:
        return []
    prefix = "" if folder[0] in ("", ".") else folder[0] + "/"
    return sorted(name for name in changed if name.startswith(prefix))


def _edited_outputs(outcome: Outcome, root: Path, out: str, changed: set) -> List[OutputDiff]:
    """Committed outputs of this job that the change touched and that are not the bytes its spec
    compiles to (a hand edit): `check` fails on them, CI would submit them, and a reviewer sees
    each as a hunk (compiled against committed). A link is never followed: it is not what the
    spec compiles to, and it is named, not read."""
    from trainspec.core.secrets import redact_bytes
    from trainspec.review.outputs import unified

    found = []
    for artifact in outcome.artifacts:
        for item in artifact.files:
            output = f"{artifact.target}/{item.path}"
            name = f"{out}/{outcome.valid.name}/{output}"
            if name not in changed:
                continue
            current = _committed(root, name, len(item.data) + EDIT_ROOM)
            if current is None or current == item.data:
                continue  # deleted (check reports it missing), or what the spec compiles to
            if isinstance(current, str):
                text = f"{name}: {current}: not what the spec compiles to (not read)"
            elif len(current) > len(item.data) + EDIT_ROOM:
                text = f"{name}: {len(current) - len(item.data):,}+ bytes longer than what the spec compiles to"
            else:
                text = unified(redact_bytes(item.data), redact_bytes(current),
                               f"compiled from {outcome.valid.source.display}",
                               f"committed {name} (what CI would submit)")
            found.append(OutputDiff(name, output, text))
    return found


EDIT_ROOM = 1 << 20  # bytes a committed output may have beyond the compiled one and still be shown as a hunk


def _committed(root: Path, name: str, limit: int) -> Union[bytes, str, None]:
    """The committed file ``name`` (repository-relative), at most ``limit`` + 1 bytes, read
    without following a link on the way (core/files.read_regular, and its folder must be where it
    says); what it is instead when it is not a regular file ("a symbolic link"); None when it is gone."""
    import stat

    from trainspec.core.files import read_regular

    path = root / name
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if Path(os.path.realpath(path.parent)) != Path(os.path.realpath(root)) / Path(name).parent:
        return "inside a linked folder"
    try:
        return read_regular(path, limit)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _relative(paths: Sequence[Path], root: Path) -> List[str]:
    out = []
    for path in paths:
        try:
            out.append(path.relative_to(root.resolve()).as_posix())
        except ValueError:
            pass
    return out


def changed_since(rev: str, root: Path) -> List[str]:
    """Files that differ between ``rev`` and the working tree, and files git does not track yet
    but does not ignore (repository-relative)."""
    tracked = git("diff", "--name-only", "--no-renames", "-z", rev, "--", cwd=root).split("\0")
    untracked = git("ls-files", "--others", "--exclude-standard", "-z", cwd=root).split("\0")
    return sorted({n for n in [*tracked, *untracked] if n})


def root_relative(paths: Sequence[str], root: Path) -> List[str]:
    """Paths the user gave (relative to where they are) as paths relative to the repository."""
    out = []
    for p in paths or ["."]:
        absolute = (Path.cwd() / p).resolve()
        try:
            out.append(absolute.relative_to(root.resolve()).as_posix() or ".")
        except ValueError:
            raise ValueError(f"{p} is outside the repository at {root}") from None
    return out
