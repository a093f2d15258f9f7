#!/usr/bin/env python3
"""Regenerate the table of docs/frontend.md that lists every function of ``tvm.relax.frontend.nn.op``.

    PYTHONPATH=python python scripts/gen_nn_op_table.py          # rewrite docs/frontend.md
    PYTHONPATH=python python scripts/gen_nn_op_table.py --check  # exit 1 if it is out of date

The table sits between ``<!-- nn-op-table -->`` and ``<!-- /nn-op-table -->``. It is made from the
cases the op-coverage tests run (tests/python/tvm/nn_op_cases.py): which functions each case
calls and which Relax ops they emit (traced while TVM exports the case), the sharding rule of
the distir ops they become, and the device counts the tests run them at.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python" / "tvm"))

import nn_op_cases  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the table is out of date")
    ap.add_argument("--path", type=Path, default=ROOT / "docs" / "frontend.md", help="the file (default: docs/frontend.md)")
    args = ap.parse_args(argv)
    old = args.path.read_text()
    new = nn_op_cases.update_table(old)
    if new == old:
        print(f"{args.path}: up to date")
        return 0
    if args.check:
        print(f"{args.path}: out of date; run: PYTHONPATH=python python scripts/gen_nn_op_table.py")
        return 1
    args.path.write_text(new)
    print(f"{args.path}: table regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
