"""`trainspec skus`: List the Azure VM sizes trainspec knows: the built-in catalog plus your team's
trainspec-skus.yaml (the nearest one from the current folder up to the repository root). Filter
by GPU model, GPU count and InfiniBand. With --import, turn what `az vm list-skus --resource-
type virtualMachines --output json` printed into entries for trainspec-skus.yaml (printed, or
merged into the file given with --write).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainspec.cli.output import UsageError


def command(args: argparse.Namespace) -> int:
    import json

    from trainspec.schema import prices as price_module
    from trainspec.schema import skus as catalog_module

    if args.import_file:
        return _import_skus(args)
    catalog, problems = catalog_module.catalog_for(Path.cwd())
    region = price_module.region_for(catalog)
    for problem in problems:
        print(problem.render(), file=sys.stderr)
    rows = []
    for sku, origin in catalog.all():
        if args.gpu and not catalog_module.gpu_matches(sku.gpu, args.gpu):
            continue
        if args.gpus is not None and sku.gpus != args.gpus:
            continue
        if args.infiniband is not None and sku.infiniband != args.infiniband:
            continue
        if sku.retired and not args.retired:
            continue
        pay, spot = price_module.rates_of(catalog, sku.name, region.name)
        rows.append({"name": sku.name, "gpus": sku.gpus, "gpu": sku.gpu, "gpu_memory_gb": sku.gpu_memory_gb,
                     "vcpus": sku.vcpus, "memory_gb": sku.memory_gb, "infiniband": sku.infiniband,
                     "retired": sku.retired, "from": origin, "note": sku.note, "vendor": sku.vendor,
                     # USD per hour for one VM in the region (None: no price), and where each comes from
                     "prices": {"pay_as_you_go": pay.usd if pay else None, "spot": spot.usd if spot else None,
                                "pay_as_you_go_from": pay.origin if pay else None,
                                "spot_from": spot.origin if spot else None}})
    # the team's clusters and their sizes (computes:, partitions:, node_groups:): what links a
    # spec's sku to the machines a target runs on
    places = {kind: dict(getattr(catalog, kind)) for kind in catalog_module.PLACES}
    if args.format == "json":
        print(json.dumps({"built_in_source": catalog_module.catalog_source(), "team_file":
                          str(catalog.team_file) if catalog.team_file else None, "skus": rows, **places,
                          "region": region.name, "region_from": region.why,
                          "prices_source": price_module.snapshot_about()}, indent=2))
        return 1 if problems else 0
    header = ("size", "GPUs", "GPU", "GPU GB", "vCPUs", "mem GB", "IB", "$/h", "spot $/h", "from")
    table = [header] + [(r["name"], str(r["gpus"]), r["gpu"] or "-", str(r["gpu_memory_gb"] or "-"), str(r["vcpus"]),
                         f"{r['memory_gb']:g}", "yes" if r["infiniband"] else "no",
                         _price(r["prices"], "pay_as_you_go"), _price(r["prices"], "spot"),
                         r["from"] + (f" (retired {r['retired']})" if r["retired"] else "")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    for kind, mapped in places.items():
        for name, size in sorted(mapped.items()):
            print(f"{kind[:-1].replace('_', ' ')} {name}: {size}")
    print(f"prices: USD per hour for one VM in {region.said()}; (team): the team's own price in "
          f"{catalog.team_file}, else from the {price_module.snapshot_about()}" if catalog.prices else
          f"prices: USD per hour for one VM in {region.said()}, from the {price_module.snapshot_about()}")
    team = f"; team file {catalog.team_file}" if catalog.team_file else f"; no {catalog_module.TEAM_FILE} here"
    print(f"{len(rows)} size(s){team}", file=sys.stderr)
    return 1 if problems else 0


def _price(prices, kind: str) -> str:
    """One VM's price per hour as the list has it, "(team)" when the team's; a size without one says so."""
    value = prices[kind]
    if value is None:
        return "no price"
    whole, _, cents = f"{value:,.6f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}" + (" (team)" if prices[f"{kind}_from"] == "team" else "")


def _import_skus(args: argparse.Namespace) -> int:
    """`az vm list-skus` JSON -> trainspec-skus.yaml entries (ruamel.yaml writes them)."""
    import io
    import json

    from ruamel.yaml import YAML

    from trainspec.schema import skus as catalog_module

    from trainspec.schema.loader import ReadProblem, read_bounded

    try:
        listed = json.loads(read_bounded(args.import_file, 256 * 1024 * 1024).decode("utf-8"))
    except ReadProblem as exc:
        raise UsageError(f"--import {args.import_file}: {exc.message}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--import {args.import_file}: not the JSON `az vm list-skus` prints ({exc})") from None
    if not isinstance(listed, list):
        raise UsageError(f"--import {args.import_file}: expected a JSON list, as `az vm list-skus --output json` prints")
    entries = {}
    for item in listed:
        if not isinstance(item, dict) or item.get("resourceType", "virtualMachines") != "virtualMachines":
            continue
        name = item.get("name")
        caps = {c.get("name"): c.get("value") for c in item.get("capabilities") or [] if isinstance(c, dict)}
        if not isinstance(name, str) or not catalog_module.looks_like_azure(name) or name in entries:
            continue
        gpus = int(caps.get("GPUs") or 0)
        if args.gpu_only and gpus == 0:
            continue
        described = catalog_module.inferred(name, gpus)
        entry = {"gpus": gpus}
        if described.gpu:
            entry["gpu"] = described.gpu
        entry["vcpus"] = int(caps.get("vCPUs") or described.vcpus)
        entry["memory_gb"] = float(caps.get("MemoryGB") or 0)
        entry["infiniband"] = str(caps.get("RdmaEnabled", "False")).lower() == "true"
        if item.get("family"):
            entry["family"] = item["family"]
        entry["source"] = "az vm list-skus"
        entries[name] = entry
    yaml = YAML()
    yaml.default_flow_style = False
    if args.write:
        target = Path(args.write)
        existing = yaml.load(target.read_text(encoding="utf-8")) if target.exists() else None
        document = existing if isinstance(existing, dict) else {"skus": {}}
        document.setdefault("skus", {})
        for name in sorted(entries):
            document["skus"][name] = entries[name]
        buffer = io.StringIO()
        yaml.dump(document, buffer)
        target.write_text(buffer.getvalue(), encoding="utf-8")
        print(f"{args.write}: {len(entries)} size(s) imported", file=sys.stderr)
        return 0
    yaml.dump({"skus": {name: entries[name] for name in sorted(entries)}}, sys.stdout)
    return 0
