#!/usr/bin/env python3
"""Regenerate the op tables of docs/ops.md from the op declarations.

    PYTHONPATH=python python scripts/gen_ops_doc.py          # rewrite docs/ops.md
    PYTHONPATH=python python scripts/gen_ops_doc.py --check  # exit 1 if it is out of date

The tables sit between ``<!-- ops-table: <category> -->`` and ``<!-- /ops-table -->``;
everything else in the file is left as written. The rendering is
``distir.ops.docgen.update_ops_doc``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distir.ops.docgen import REGENERATE, ops_doc_path, update_ops_doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if docs/ops.md is out of date")
    ap.add_argument("--path", type=Path, default=ops_doc_path(), help="the file (default: docs/ops.md)")
    args = ap.parse_args(argv)
    old = args.path.read_text()
    new = update_ops_doc(old)
    if new == old:
        print(f"{args.path}: up to date")
        return 0
    if args.check:
        print(f"{args.path}: out of date; run: {REGENERATE}")
        return 1
    args.path.write_text(new)
    print(f"{args.path}: tables regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
