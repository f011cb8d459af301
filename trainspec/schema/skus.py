"""Catalog of Azure VM sizes, used to check ``resources.sku`` and ``gpus_per_node``.

The facts live in ``skus.json`` next to this module (reviewed as a diff; every entry names the
Microsoft Learn page it comes from). This module is on the ``compile`` hot path, so it imports
little and reads the JSON once, on first use.
"""

import json
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from trainspec.core import memo
from trainspec.core.patterns import Lazy
from trainspec.core.records import Record

_PREFIX = "standard_"
_CATALOG = Path(__file__).with_name("skus.json")


class Sku(Record):
    __slots__ = ("name", "gpus", "gpu", "gpu_memory_gb", "vcpus", "memory_gb", "infiniband", "family", "note",
                 "retired", "vendor")

    def __init__(self, name: str, gpus: int, gpu: Optional[str], gpu_memory_gb: int, vcpus: int, memory_gb: float,
                 infiniband: bool, family: str, note: Optional[str] = None, retired: Optional[str] = None,
                 vendor: Optional[str] = None) -> None:
        self.name = name                    # canonical Azure name, e.g. "Standard_NC24rs_v3"
        self.gpus = gpus                    # whole GPUs per VM (0 for CPU sizes)
        self.gpu = gpu                      # GPU model, e.g. "V100"; None iff gpus == 0
        self.gpu_memory_gb = gpu_memory_gb  # memory of one GPU (0 for CPU sizes)
        self.vcpus = vcpus
        self.memory_gb = memory_gb
        self.infiniband = infiniband        # has an InfiniBand/RDMA back-end network usable by NCCL/MPI
        self.family = family                # size series, e.g. "NCv3"
        self.note = note                    # caveats: retirement, SR-IOV, what a letter in the name means
        self.retired = retired              # date Azure stopped provisioning the size (ISO), if it did
        self.vendor = vendor                # who makes its GPUs: "nvidia" or "amd" (VENDORS); None: no GPU, or unknown


@lru_cache(maxsize=1)
def _catalog() -> Tuple[str, Tuple[Sku, ...], Dict[str, Sku]]:
    data = json.loads(_CATALOG.read_text(encoding="utf-8"))
    skus = tuple(
        Sku(name=name, gpus=int(e["gpus"]), gpu=e["gpu"], gpu_memory_gb=int(e["gpu_memory_gb"]),
            vcpus=int(e["vcpus"]), memory_gb=float(e["memory_gb"]), infiniband=bool(e["infiniband"]),
            family=e["family"], note=e.get("note"), retired=e.get("retired"), vendor=gpu_vendor(e["gpu"]))
        for name, e in sorted(data["skus"].items()))
    index: Dict[str, Sku] = {}
    for sku in skus:
        key = sku.name.lower()
        index[key] = sku
    return data["source"], skus, index


def _normalize(name: str) -> str:
    return name.strip().lower()


def lookup(name: str) -> Optional[Sku]:
    """The catalog entry for ``name`` (case-insensitive), or None.

    The returned Sku carries the canonical spelling in ``.name``. A name without ``Standard_``
    (``NC24ads_A100_v4``) is none: Azure spells every size with it, a spec or a team file that
    leaves it out is told so at its line (near_miss: did you mean), never quietly spelt anew.
    """
    if not isinstance(name, str):
        return None
    return _catalog()[2].get(_normalize(name))


def closest(name: str, n: int = 3) -> List[str]:
    """Up to ``n`` canonical names that look like ``name``, best first (for "did you mean")."""
    import difflib  # only needed on the error path; keeps the hot path's imports small

    if not isinstance(name, str) or n <= 0:
        return []
    query = _normalize(name)
    if not query.startswith(_PREFIX):
        query = _PREFIX + query
    by_key = {sku.name.lower(): sku.name for sku in _catalog()[1]}
    return [by_key[k] for k in difflib.get_close_matches(query, list(by_key), n=n)]


def catalog_source() -> str:
    """Where the catalog's facts come from (URLs and the date they were checked)."""
    return _catalog()[0]


def all_skus() -> List[Sku]:
    """Every entry, sorted by name."""
    return list(_catalog()[1])


# --- sizes the catalog does not have ---------------------------------------------------------------

# Azure's naming: Standard_<family><vCPUs><additive features>[_<accelerator>...][_v<version>], e.g.
# Standard_ND96isr_H100_v5 (features i, s, r: r = RDMA/InfiniBand), Standard_NCC40ads_H100_v5.
_AZURE_NAME = Lazy(r"^Standard_(?P<family>[A-Z]{1,5})(?P<vcpus>\d+)(?P<features>[a-z]*)"
                   r"(?P<rest>(?:_[A-Za-z0-9]+)*)$")
# accelerators a size name may carry, for a size the catalog does not know (first match wins)
_GPU_TOKENS = ("GB300", "GB200", "H200", "H100", "A100", "A10", "MI300X", "MI200", "V100", "P100", "P40", "T4",
               "L40S", "L40", "L4", "M60")


def looks_like_azure(name: str) -> bool:
    """Whether ``name`` is spelt the way Azure names VM sizes (so it may be a size newer than the
    catalog), as opposed to a typo of one."""
    return isinstance(name, str) and _AZURE_NAME.fullmatch(name.strip()) is not None


def near_miss(name: str, known: Sequence[str]) -> List[str]:
    """Known names that ``name`` is a misspelling of: the same but for separators or case, for
    ``Standard_`` left out, or for the order of its feature letters (ND96irs for ND96isr). A
    different vCPU count, version or family letter is a different size, perhaps a new one: not a
    near miss."""
    def key(text: str, sort_features: bool) -> str:
        text = re.sub(r"[\s_\-]", "", text.lower())
        text = text if text.startswith("standard") else "standard" + text
        if sort_features:
            m = re.match(r"^(standard[a-z]{1,5}\d+)([a-z]*)(.*)$", text)
            if m:
                text = m.group(1) + "".join(sorted(m.group(2))) + m.group(3)
        return text

    wanted = {key(name, False), key(name, True)}
    return [k for k in known if key(k, False) in wanted or key(k, True) in wanted]


def one_edit(name: str, known: Sequence[str]) -> List[str]:
    """Known names one edit (a character changed, added or removed; case aside) from ``name``:
    Standard_ND96asr_v5 for Standard_ND96asr_v4. Such a size may be new, or a typo: say both."""
    def within_one(a: str, b: str) -> bool:
        if a == b or abs(len(a) - len(b)) > 1:
            return False
        if len(a) > len(b):
            a, b = b, a
        i = next((k for k in range(len(a)) if a[k] != b[k]), len(a))
        return a[i + (len(a) == len(b)):] == b[i + 1:]

    query = _normalize(name)
    if not query.startswith(_PREFIX):
        query = _PREFIX + query
    return [k for k in known if within_one(query, _normalize(k))]


GPU_TYPE = "gpu"  # what a target setting names when it asks its scheduler for a GPU model (Slurm's GRES type)


def gpu_model_in(text: str) -> Optional[str]:
    """The GPU model a scheduler's name for a GPU names (``h100``, ``a100_80g``,
    ``nvidia_h100_80gb_hbm3``: H100, A100, H100), from the models the catalog knows; None when
    it names none of them (``hopper``)."""
    models = {(sku.gpu or "").split()[0] for sku in all_skus() if sku.gpu} | set(_GPU_TOKENS)
    for model in sorted(models, key=lambda m: (-len(m), m)):
        if re.search(rf"(?<![a-z0-9]){re.escape(model.lower())}(?![0-9])", text.lower()):
            return model
    return None


def gpu_matches(gpu: Optional[str], wanted: str) -> bool:
    """``--gpu H100`` names a GPU model: it lists H100 and its variants (H100 NVL); ``--gpu "H100 NVL"``
    only those."""
    have, want = (gpu or "").lower().split(), wanted.lower().split()
    return bool(want) and have[:len(want)] == want


def inferred(name: str, gpus: int) -> Sku:
    """A size the catalog does not have, described from what the spec and the name say: the GPU
    count the spec gives, InfiniBand from the 'r' feature letter, the GPU from a known token."""
    m = _AZURE_NAME.fullmatch(name.strip())
    rest = m.group("rest").upper() if m else ""
    gpu = next((t for t in _GPU_TOKENS if re.search(rf"(?:^|_){t}(?:_|$)", rest)), None) if gpus else None
    return Sku(name=name.strip(), gpus=gpus, gpu=gpu or ("unknown" if gpus else None), gpu_memory_gb=0,
               vcpus=int(m.group("vcpus")) if m else 0, memory_gb=0.0,
               infiniband=bool(m and "r" in m.group("features")), family=m.group("family") if m else "unknown",
               note="not in the catalog: described from the spec's gpus_per_node and the size's name",
               vendor=gpu_vendor(gpu))


# --- GPU vendors ------------------------------------------------------------------------------------

# Who makes a size's GPUs decides what runs on it: the device plugin's Kubernetes resource
# (nvidia.com/gpu, amd.com/gpu) and the images that can use the GPUs (CUDA, or ROCm).
VENDORS = {"nvidia": "NVIDIA", "amd": "AMD"}
_IMAGE_STACK = {"nvidia": "CUDA", "amd": "ROCm"}
_EXAMPLE_IMAGE = {"nvidia": "nvcr.io/nvidia/pytorch:24.08-py3", "amd": "rocm/pytorch:latest"}


def gpu_vendor(gpu: Optional[str]) -> Optional[str]:
    """The vendor of a GPU model: AMD's Instinct models are named MI..., Azure's other GPUs are
    NVIDIA's; None without a GPU, or for a model not known."""
    if not gpu or gpu == "unknown":
        return None
    return "amd" if gpu.upper().startswith("MI") else "nvidia"


def image_vendor(image: str) -> Optional[str]:
    """The GPU vendor an image is built for, when its name says so: CUDA (``cuda`` in it, or NVIDIA's
    registry nvcr.io) or ROCm (``rocm`` in it); None when it says neither, or both."""
    text = image.lower()
    nvidia = "cuda" in text or text.startswith(("nvcr.io/", "nvcr.io#"))
    amd = "rocm" in text
    return None if nvidia == amd else ("nvidia" if nvidia else "amd")


def vendor_mismatch(image: str, sku: Optional[Sku]) -> Optional[Tuple[str, str]]:
    """(message, hint) when ``image`` is built for the other vendor than ``sku``'s GPUs, else None."""
    from trainspec.core.diagnostics import shown

    built_for = image_vendor(image)
    if sku is None or sku.vendor is None or built_for is None or built_for == sku.vendor:
        return None
    return (f"'{shown(image)}' is a {_IMAGE_STACK[built_for]} image, built for {VENDORS[built_for]} GPUs, and {sku.name} "
            f"has {VENDORS[sku.vendor]} {sku.gpu} GPUs: torch in it would find no GPU",
            f"use a {_IMAGE_STACK[sku.vendor]} image, e.g. {_EXAMPLE_IMAGE[sku.vendor]}")


# --- a team's own sizes ---------------------------------------------------------------------------

TEAM_FILE = "trainspec-skus.yaml"


# What a team's clusters run on: each mapping of trainspec-skus.yaml names a kind of place a job
# runs (an Azure ML compute cluster, a Slurm partition, an HPC Pack node group) and maps a name to
# the VM size it has; with an example line for a hint.
PLACES = {"computes": "computes: {gpu-cluster: Standard_NC24ads_A100_v4}",
          "partitions": "partitions: {gpu-h100: Standard_ND96isr_H100_v5}",
          "node_groups": "node_groups: {H100Nodes: Standard_ND96isr_H100_v5}"}


class Catalog(Record):
    """The built-in sizes, plus a team's own from ``trainspec-skus.yaml`` (which win)."""

    __slots__ = ("team_file", "team", "computes", "partitions", "node_groups", "region", "prices")

    def __init__(self, team_file: Optional[Path] = None, team: Tuple[Sku, ...] = (),
                 computes: Tuple[Tuple[str, str], ...] = (), partitions: Tuple[Tuple[str, str], ...] = (),
                 node_groups: Tuple[Tuple[str, str], ...] = (), region: Optional[str] = None,
                 prices: Tuple[Tuple[str, Optional[float], Optional[float]], ...] = ()) -> None:
        self.team_file = team_file
        self.team = team
        self.computes = computes  # Azure ML compute clusters and their VM size
        self.partitions = partitions  # Slurm partitions and their VM size
        self.node_groups = node_groups  # HPC Pack node groups and their VM size
        self.region = region  # the team's Azure region (region:), which prices its jobs (schema/prices.py)
        # the team's own rates (prices:), which win over the snapshot's: (canonical size, pay-as-you-go
        # USD/h or None, spot USD/h or None)
        self.prices = prices

    def compute_size(self, compute: str) -> Optional[Sku]:
        """The size of the team's compute cluster ``compute`` (``computes:`` in the team file)."""
        return self.place_size("computes", compute)

    def place_size(self, places: str, name: str) -> Optional[Sku]:
        """The size the team file maps ``name`` to under ``places`` (one of PLACES), or None."""
        size = dict(getattr(self, places)).get(name)
        return self.lookup(size) if size is not None else None

    def lookup(self, name: str) -> Optional[Sku]:
        if isinstance(name, str):
            key = _normalize(name)
            for sku in self.team:
                if sku.name.lower() == key:
                    return sku
        return lookup(name)

    def names(self) -> List[str]:
        return sorted({*(s.name for s in self.team), *(s.name for s in all_skus())})

    def all(self) -> List[Tuple[Sku, str]]:
        """Every size with where it comes from (built-in, or the team file), sorted by name."""
        team = {s.name.lower(): s for s in self.team}
        rows = [(s, "built-in") for s in all_skus() if s.name.lower() not in team]
        rows += [(s, str(self.team_file)) for s in self.team]
        return sorted(rows, key=lambda row: row[0].name.lower())


def team_file_for(start: Path) -> Optional[Path]:
    """The nearest ``trainspec-skus.yaml`` from ``start`` up to the repository root (the first
    folder with a .git), or None; looked for once per folder in a command (core/memo.py)."""
    return memo.answer(_team_file_for, os.fspath(start))


def _team_file_for(text: str) -> Optional[Path]:
    start = Path(text)
    for folder in (start, *start.parents):
        candidate = folder / TEAM_FILE
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            return None
    return None


_TEAM_FIELDS = {"gpus": int, "gpu": str, "gpu_memory_gb": int, "vcpus": int, "memory_gb": (int, float),
                "infiniband": bool, "family": str, "note": str, "retired": str, "source": str, "vendor": str}
_TEAM_REQUIRED = ("gpus", "infiniband")


def _outside_repository(file: Path) -> Optional[str]:
    """Why the catalog ``file`` is never read: a link that leads out of its repository or into
    .git (a pull request's `trainspec-skus.yaml -> ../.git/config`); None otherwise."""
    import os

    from trainspec.core.files import in_repository, inside
    from trainspec.schema.loader import ReadProblem, real_path, repository_root

    root = repository_root(Path(os.path.abspath(file)).parent)
    try:
        real = real_path(file)
    except ReadProblem:
        return None  # reading it says what it is
    if root is None or in_repository(real, root):
        return None
    where = f"inside {root / '.git'}" if inside(real, root) else f"outside the repository {root}"
    return f"is a symbolic link to {real}, {where}: never read"


def load_team(file: Path):
    """(Catalog, diagnostics located in the file). Every entry names a size Azure spells the
    Azure way and says at least its GPU count and whether it has InfiniBand."""
    from trainspec.core.diagnostics import SpecError, error
    from trainspec.schema.loader import load_file

    import os

    shown = os.path.relpath(file)  # as the user would name it, from where they are
    named = str(file) if shown.startswith("..") else shown
    outside = _outside_repository(file)
    if outside:
        return Catalog(team_file=file), [error((), outside, "a team catalog is a regular file inside the "
                                               "repository").at(named, 1, 1)]
    try:
        doc = load_file(named)
    except SpecError as exc:
        return Catalog(team_file=file), exc.diagnostics
    problems = []

    def bad(path, message, hint=None):
        problems.append(doc.locate(error(path, message, hint)))

    data = doc.data if isinstance(doc.data, dict) else {}
    entries = data.get("skus", {} if any(k in data for k in (*PLACES, *PRICE_FIELDS)) else None)
    if not isinstance(entries, dict):
        bad((), "a team catalog is a mapping `skus: {<Azure size>: {gpus: N, infiniband: true|false, ...}}`",
            "and/or " + ", ".join(f"`{example}`" for example in PLACES.values()))
        return Catalog(team_file=file), problems
    for key in data:
        if key != "skus" and key not in PLACES and key not in PRICE_FIELDS:
            bad((key,), f"unknown field '{key}'", "fields: skus, " + ", ".join((*PLACES, *PRICE_FIELDS)))
    team = []
    for name, entry in entries.items():
        where = ("skus", name)
        if not looks_like_azure(str(name)):
            bad(where, f"{_written(name)} is not spelt like an Azure VM size", "e.g. Standard_ND96isr_H100_v5")
            continue
        if not isinstance(entry, dict):
            bad(where, "expected a mapping of the size's facts", "gpus: 8, gpu: H100, infiniband: true")
            continue
        ok = True
        for key in entry:
            if key not in _TEAM_FIELDS:
                bad((*where, key), f"unknown field '{key}'", "fields: " + ", ".join(_TEAM_FIELDS))
                ok = False
            elif isinstance(entry[key], bool) != (_TEAM_FIELDS[key] is bool) \
                    or not isinstance(entry[key], _TEAM_FIELDS[key]):
                kind = _TEAM_FIELDS[key]
                words = {int: "a whole number", str: "text", bool: "true or false"}
                bad((*where, key), f"expected {'a number' if kind == (int, float) else words[kind]}")
                ok = False
        for key in _TEAM_REQUIRED:
            if key not in entry:
                bad(where, f"'{key}' is required", "every size says gpus and infiniband")
                ok = False
        if ok and entry["gpus"] < 0:
            bad((*where, "gpus"), "expected 0 or more")
            ok = False
        for key in ("gpu_memory_gb", "vcpus", "memory_gb"):
            value = entry.get(key, 0)
            if ok and not (math.isfinite(value) and 0 <= value <= 1 << 40):
                bad((*where, key), "expected a finite number, 0 or more")
                ok = False
        if ok and "vendor" in entry and entry["vendor"] not in VENDORS:
            bad((*where, "vendor"), f"'{entry['vendor']}' is not a GPU vendor trainspec knows",
                "vendor: " + " or ".join(VENDORS) + " (left out: AMD for an MI... GPU, else NVIDIA)")
            ok = False
        if not ok:
            continue
        described = inferred(str(name), entry["gpus"])
        team.append(Sku(name=str(name), gpus=entry["gpus"], gpu=entry.get("gpu", described.gpu),
                        gpu_memory_gb=entry.get("gpu_memory_gb", 0), vcpus=entry.get("vcpus", described.vcpus),
                        memory_gb=float(entry.get("memory_gb", 0)), infiniband=entry["infiniband"],
                        family=entry.get("family", described.family), note=entry.get("note"),
                        retired=entry.get("retired"),
                        vendor=(entry.get("vendor") or gpu_vendor(entry.get("gpu", described.gpu)))
                        if entry["gpus"] else None))
    catalog = Catalog(team_file=file, team=tuple(team))
    places = {kind: _places(data, kind, catalog, bad) for kind in PLACES}
    region, prices = _region(data, bad), _prices(data, catalog, bad)
    return Catalog(team_file=file, team=catalog.team, region=region, prices=prices, **places), problems


def _written(value: Any) -> str:
    """A value of the team file in a message: text and finite numbers quoted as written, anything
    else by its kind (.inf or .nan is never echoed as `inf` or `nan`)."""
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                  and math.isfinite(value)):
        return f"'{value}'"
    if isinstance(value, bool) or value is None:
        return f"'{str(value).lower() if value is not None else 'null'}'"
    return {float: "a number that is not finite", list: "a list", dict: "a mapping"}.get(type(value), "a value")


def _places(data: Dict[str, Any], kind: str, catalog: Catalog, bad) -> Tuple[Tuple[str, str], ...]:
    """The team file's ``kind`` mapping (one of PLACES) as (name, canonical size) pairs; each
    name whose size is unknown, or not a name at all, reported at its line through ``bad``."""
    mapping = data.get(kind, {})
    if not isinstance(mapping, dict):
        bad((kind,), "expected a mapping of names to the VM size each runs on", PLACES[kind])
        return ()
    known = []
    for name, size in mapping.items():
        if not isinstance(size, str) or catalog.lookup(size) is None:
            close = closest(str(size)) if isinstance(size, str) else []
            bad((kind, name), f"{_written(size)} is not a VM size trainspec knows",
                f"did you mean {', '.join(close)}?" if close else f"add it under skus: in {TEAM_FILE}")
            continue
        known.append((str(name), catalog.lookup(size).name))
    return tuple(known)


# What a team says of its prices: its region, and its own rates (negotiated, reserved...) per size.
PRICE_FIELDS = {"region": "region: eastus",
                "prices": "prices: {Standard_ND96isr_H100_v5: {pay_as_you_go: 70.0, spot: 20.0}}"}
RATES = ("pay_as_you_go", "spot")  # USD per hour for one VM
# The most one VM may cost per hour in a team's prices: ~8x the dearest size the snapshot prices. A
# figure beyond it (1e308, .inf, .nan) is a mistake, or a pull request hiding a cost behind one: it
# is an error at its line, so no total ever overflows to `$inf` or compares as nan.
PRICE_LIMIT = 1_000


def sensible_price(value: Any) -> bool:
    """A team's rate: a number (not a bool), finite, from 0 to PRICE_LIMIT."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
        and 0 <= value <= PRICE_LIMIT


def _region(data: Dict[str, Any], bad) -> Optional[str]:
    """The team file's ``region:``, an Azure region name (lower case letters and digits)."""
    region = data.get("region")
    if region is None:
        return None
    if not isinstance(region, str) or not re.fullmatch(r"[a-z][a-z0-9]*", region):
        bad(("region",), f"{_written(region)} is not spelt like an Azure region",
            "e.g. region: eastus (lower case, no spaces)")
        return None
    return region


def _prices(data: Dict[str, Any], catalog: Catalog, bad) -> Tuple[Tuple[str, Optional[float], Optional[float]], ...]:
    """The team file's ``prices:`` as (canonical size, pay-as-you-go, spot); every mistake
    reported at its line through ``bad``, the entries without one kept."""
    mapping = data.get("prices", {})
    if not isinstance(mapping, dict):
        bad(("prices",), "expected a mapping of VM sizes to their rates", PRICE_FIELDS["prices"])
        return ()
    found = []
    for name, rates in mapping.items():
        where = ("prices", name)
        sku = catalog.lookup(name) if isinstance(name, str) else None
        ok = True
        if sku is None:
            close = closest(name) if isinstance(name, str) else []
            bad(where, f"{_written(name)} is not a VM size trainspec knows",
                f"did you mean {', '.join(close)}?" if close else f"add it under skus: in {TEAM_FILE}")
            ok = False
        if not isinstance(rates, dict) or not rates:
            bad(where, "expected the size's rates in USD per hour for one VM", "pay_as_you_go: 70.0, spot: 20.0")
            continue
        for key, value in rates.items():
            if key not in RATES:
                bad((*where, key), f"unknown field '{key}'", "fields: " + ", ".join(RATES))
                ok = False
            elif not sensible_price(value):
                said = f", not '{value}'" if isinstance(value, (int, float)) and math.isfinite(value) else ""
                bad((*where, key), f"expected a price in USD per hour for one VM, a number from 0 to "
                    f"{PRICE_LIMIT:,}{said}", f"{key}: 70.0 (the dearest size the snapshot prices costs "
                    "$127.82/h)")
                ok = False
        if ok:
            found.append((sku.name, *(None if rates.get(k) is None else float(rates[k]) for k in RATES)))
    return tuple(found)


_TEAM_CACHE: Dict[Path, Tuple[float, Any]] = {}


def catalog_for(spec_dir: Path):
    """(Catalog, diagnostics) for a spec in ``spec_dir``: the built-in sizes and the team file
    nearest to it. Read once per file and modification time; the diagnostics are a new list at
    every call, the caller's to extend (validate adds each spec's own problems to it: a shared
    list gave every later spec of the repository the earlier ones' problems)."""
    file = team_file_for(spec_dir)
    if file is None:
        return Catalog(), []
    stamp = file.stat().st_mtime_ns
    cached = _TEAM_CACHE.get(file)
    if cached is None or cached[0] != stamp:
        catalog, diagnostics = load_team(file)
        cached = _TEAM_CACHE[file] = (stamp, (catalog, tuple(diagnostics)))
    catalog, diagnostics = cached[1]
    return catalog, list(diagnostics)
