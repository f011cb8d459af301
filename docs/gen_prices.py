"""trainspec/schema/prices.json, generated from a SkyPilot catalog snapshot of Azure VM prices.

    python docs/gen_prices.py [CSV]           # rewrite trainspec/schema/prices.json
    python docs/gen_prices.py [CSV] --check   # exit 1 when it is not what the CSV gives

CSV: the snapshot's vms-gpu.csv (default: $TRAINSPEC_PRICES_CSV, else
../shared/reference/azure-gpu-prices/vms-gpu.csv next to the repository). The CSV itself is not
in the repository (the catalog repository's licence is not determined); only the prices of the
sizes trainspec's catalog (trainspec/schema/skus.json) knows are carried, per region, in USD per
hour for one VM: pay-as-you-go, and spot where the snapshot has a real spot rate.

The snapshot's caveats, each handled here (and said in the file's ``notes``):

- a row whose spot price equals its pay-as-you-go price (every H100 row) has no real spot rate:
  its spot price is left out, so spot on that size is "no spot price", never the full price;
- an empty or zero price (e.g. ND40s_v3 in eastus) is no price: left out;
- ``_Promo`` sizes are priced by Azure's Low Priority meter: left out (not in the catalog anyway);
- ``AcceleratorCount`` (12 for ND96isr_H100_v5, which has 8) is not carried: GPU counts come
  from skus.json;
- a size absent from a region has no price there (US regions only).
"""

import csv
import json
import os
import sys
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
SKUS = ROOT / "trainspec" / "schema" / "skus.json"
OUT = ROOT / "trainspec" / "schema" / "prices.json"
DEFAULT_CSV = ROOT.parent / "shared" / "reference" / "azure-gpu-prices" / "vms-gpu.csv"
SOURCE = ("SkyPilot catalog snapshot: catalogs/v6/azure/vms.csv of github.com/skypilot-org/skypilot-catalog "
          "(Azure Retail Prices API, priceType Consumption, Linux meters)")
COMMIT = "098741e70562f65d7af1cceb81e33b284f742604"
DATE = "unknown, after 2023-12-06"
NOTES = [
    "USD per hour for one VM, Linux, list prices: no discounts, disks, egress or public IPs",
    "pay_as_you_go: the Price column; spot: the SpotPrice column",
    "a spot price equal to the pay-as-you-go price (every H100 row) is not a real spot rate: left out",
    "an empty or zero price is no price: left out",
    "_Promo sizes (priced by the Low Priority meter) are left out",
    "AcceleratorCount is not carried (12 for ND96isr_H100_v5, which has 8): GPU counts come from skus.json",
    "US regions only; a size absent from a region has no price there",
]


def csv_path(argv) -> Path:
    given = [a for a in argv if not a.startswith("--")]
    if given:
        return Path(given[0])
    return Path(os.environ.get("TRAINSPEC_PRICES_CSV") or DEFAULT_CSV)


def _price(text: str) -> Optional[float]:
    value = float(text) if text.strip() else 0.0
    return value if value > 0 else None


def generate(csv_file: Path, skus_file: Path = SKUS) -> str:
    """The text of prices.json for the sizes of ``skus_file`` from the snapshot ``csv_file``."""
    known = set(json.loads(skus_file.read_text(encoding="utf-8"))["skus"])
    prices: Dict[str, Dict[str, Dict[str, float]]] = {}
    with csv_file.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            size = row["InstanceType"]
            if size not in known or "_Promo" in size:
                continue
            rates = {}
            pay = _price(row["Price"])
            spot = _price(row["SpotPrice"])
            if pay is not None:
                rates["pay_as_you_go"] = pay
            if spot is not None and spot != pay:
                rates["spot"] = spot
            if rates:
                prices.setdefault(size, {})[row["Region"]] = rates
    document = {"source": SOURCE, "commit": COMMIT, "date": DATE, "notes": NOTES,
                "prices": {size: dict(sorted(regions.items())) for size, regions in sorted(prices.items())}}
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def main(argv) -> int:
    source = csv_path(argv)
    if not source.is_file():
        print(f"gen_prices: {source}: no such file (give the snapshot's vms-gpu.csv, or set TRAINSPEC_PRICES_CSV)",
              file=sys.stderr)
        return 2
    text = generate(source)
    if "--check" in argv:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python docs/gen_prices.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: prices of {text.count(chr(10) + '    ' + chr(34) + 'Standard_')} size(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
