"""docs/capabilities.md, generated from every target's CANNOT_RUN table.

    python docs/gen_capabilities.py           # rewrite docs/capabilities.md
    python docs/gen_capabilities.py --check [PAGE]   # exit 1 when it (or PAGE) is stale (tests/test_capabilities.py)

The page itself is `trainspec.compiler.capabilities.matrix()`; this script only gathers the
tables, which live with each target's lowering (a layer above the catalogue: docs/architecture.md).
"""

import sys
from pathlib import Path

from trainspec.registry.build import target
from trainspec.compiler.capabilities import matrix
from trainspec.registry import TARGETS

PAGE = Path(__file__).resolve().parent / "capabilities.md"


def target_tables():
    """Every registered target's CANNOT_RUN, in the registry's order."""
    return {name: target(name).CANNOT_RUN for name in TARGETS}


def main(argv) -> int:
    page = matrix(target_tables())
    if argv[:1] == ["--check"] and len(argv) <= 2:
        checked = Path(argv[1]) if len(argv) == 2 else PAGE
        current = checked.read_text(encoding="utf-8") if checked.is_file() else None
        if current != page:
            print(f"{checked} is stale: run python docs/gen_capabilities.py")
            return 1
        return 0
    if argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
