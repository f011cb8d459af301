"""What an Azure VM size costs per hour, and where that figure comes from.

The built-in figures are ``prices.json`` next to this module, written by ``docs/gen_prices.py``
from a SkyPilot catalog snapshot (its source, commit and date are in the file). A team's
``trainspec-skus.yaml`` may name its ``region:`` and its own ``prices:`` (negotiated rates),
which win. Only plan, review and ``skus`` read prices: ``compile`` and ``check`` never load
this file.

Which region prices a job: the region the job's own platform names (a cluster the
target starts in a region of its own), else the team file's ``region:``, else DEFAULT_REGION, which every
output calls "the default region".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from trainspec.schema.skus import Catalog

_SNAPSHOT = Path(__file__).with_name("prices.json")
DEFAULT_REGION = "eastus"
PAY_AS_YOU_GO, SPOT = "pay_as_you_go", "spot"


@lru_cache(maxsize=1)
def snapshot() -> Dict[str, Any]:
    """The built-in prices file, read once."""
    return json.loads(_SNAPSHOT.read_text(encoding="utf-8"))


def snapshot_about() -> str:
    """Where the built-in prices come from and when they were taken, in one line."""
    data = snapshot()
    return f"{data['source']}, commit {data['commit'][:12]}, taken: date {data['date']}"


@dataclass(frozen=True)
class Region:
    name: str
    why: str  # the target's own field that names it, "region: in trainspec-skus.yaml", "the default region"

    def said(self) -> str:
        return f"{self.name} ({self.why})"


def region_for(catalog: Catalog, own: Optional[str] = None, own_why: str = "") -> Region:
    """The region that prices a job: ``own`` (its platform's, e.g. a Ray cluster's location),
    else the team's, else the default region."""
    if own:
        return Region(own, own_why)
    if catalog.region:
        return Region(catalog.region, f"region: in {catalog.team_file.name if catalog.team_file else 'the team file'}")
    return Region(DEFAULT_REGION, "the default region")


@dataclass(frozen=True)
class Rate:
    """One VM's price per hour: ``usd`` and where it comes from (``origin``: "team" or "snapshot")."""

    usd: float
    origin: str


def rate(catalog: Catalog, size: str, region: str, kind: str) -> Optional[Rate]:
    """What one VM of ``size`` costs per hour in ``region`` (``kind``: PAY_AS_YOU_GO or SPOT):
    the team's rate for the size wins; else the snapshot's; None when neither has one."""
    sku = catalog.lookup(size)
    name = sku.name if sku is not None else size
    for team_size, pay, spot in catalog.prices:
        if team_size == name:
            value = pay if kind == PAY_AS_YOU_GO else spot
            if value is not None:
                return Rate(value, "team")
    value = snapshot()["prices"].get(name, {}).get(region, {}).get(kind)
    return Rate(value, "snapshot") if value is not None else None


def rates_of(catalog: Catalog, size: str, region: str) -> Tuple[Optional[Rate], Optional[Rate]]:
    """(pay-as-you-go, spot) of ``size`` in ``region``."""
    return rate(catalog, size, region, PAY_AS_YOU_GO), rate(catalog, size, region, SPOT)


def regions_priced(size: str) -> Tuple[str, ...]:
    """The regions where the snapshot prices ``size`` (canonical name)."""
    return tuple(snapshot()["prices"].get(size, {}))


def usd(value: float) -> str:
    """A price as text: $1,234.56 (cents, rounded half to even on the float's decimal value). Team
    rates are bounded where they are read (skus.PRICE_LIMIT), so a sum is always finite; one that
    is not is said in words, never `$inf`."""
    if not math.isfinite(value):
        return "an amount too large to say"
    return f"${value:,.2f}"
