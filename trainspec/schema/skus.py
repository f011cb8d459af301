"""Catalog of Azure VM sizes, used to check ``resources.sku`` and ``gpus_per_node``.

The facts live in ``skus.json`` next to this module (reviewed as a diff; every entry names the
Microsoft Learn page it comes from). This module is on the ``compile`` hot path, so it imports
little and reads the JSON once, on first use.
"""

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

_PREFIX = "standard_"
_CATALOG = Path(__file__).with_name("skus.json")


@dataclass(frozen=True)
class Sku:
    name: str                     # canonical Azure name, e.g. "Standard_NC24rs_v3"
    gpus: int                     # whole GPUs per VM (0 for CPU sizes)
    gpu: Optional[str]            # GPU model, e.g. "V100"; None iff gpus == 0
    gpu_memory_gb: int            # memory of one GPU (0 for CPU sizes)
    vcpus: int
    memory_gb: float
    infiniband: bool              # has an InfiniBand/RDMA back-end network usable by NCCL/MPI
    family: str                   # size series, e.g. "NCv3"
    note: Optional[str] = None    # caveats: retirement, SR-IOV, what a letter in the name means
    retired: Optional[str] = None # date Azure stopped provisioning the size (ISO), if it did


@lru_cache(maxsize=1)
def _catalog() -> Tuple[str, Tuple[Sku, ...], Dict[str, Sku]]:
    data = json.loads(_CATALOG.read_text(encoding="utf-8"))
    skus = tuple(
        Sku(name=name, gpus=int(e["gpus"]), gpu=e["gpu"], gpu_memory_gb=int(e["gpu_memory_gb"]),
            vcpus=int(e["vcpus"]), memory_gb=float(e["memory_gb"]), infiniband=bool(e["infiniband"]),
            family=e["family"], note=e.get("note"), retired=e.get("retired"))
        for name, e in sorted(data["skus"].items()))
    index: Dict[str, Sku] = {}
    for sku in skus:
        key = sku.name.lower()
        index[key] = sku
        if key.startswith(_PREFIX):
            index.setdefault(key[len(_PREFIX):], sku)
    return data["source"], skus, index


def _normalize(name: str) -> str:
    return name.strip().lower()


def lookup(name: str) -> Optional[Sku]:
    """The catalog entry for ``name`` (case-insensitive, "Standard_" optional), or None.

    The returned Sku carries the canonical spelling in ``.name``.
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
