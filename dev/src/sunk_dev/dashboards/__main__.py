"""`python -m sunk_dev.dashboards [--check] [--out DIR]`: write the chart's dashboards, or
(with --check) exit 1 naming the files a fresh generation would change."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sunk_dev.dashboards import chart_dashboards_dir, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sunk_dev.dashboards", description=__doc__)
    parser.add_argument("--out", type=Path, default=chart_dashboards_dir(), help="where to write")
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        differing = stale(args.out)
        for name in differing:
            print(f"{args.out / name}: differs from a fresh generation", file=sys.stderr)
        if differing:
            print("run `python -m sunk_dev.dashboards` and commit the result", file=sys.stderr)
        return 1 if differing else 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
