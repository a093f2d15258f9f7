#!/usr/bin/env python
"""Time distir's parser and printer on a generated module of N bindings.

The module is a chain of adds and matmuls in one dataflow block, once on static
shapes and once on symbolic shapes (``"n"``, ``"m * num_workers"``). The canonical text
(the printer's own output, with every binding annotated) is parsed and printed
separately; each number is the best of ``--repeat`` runs. The bar is parse + print
under 2 seconds for 10,000 bindings.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import distir
from distir.script.printer import print_module

BAR_SECONDS = 2.0


def generate(n: int, symbolic: bool) -> str:
    """Unannotated source of a module with ``n`` bindings (types are inferred once, then printed)."""
    rows = '"m * num_workers"' if symbolic else "128"
    cols = '"n"' if symbolic else "128"
    lines = [
        "@I.ir_module",
        "class Module:",
        "    @R.function",
        (
            f"    def main(x: R.Tensor(({rows}, {cols}), dtype=\"float32\"), "
            f"w: R.Tensor(({cols}, {cols}), dtype=\"float32\")):"
        ),
        "        with R.dataflow():",
        "            lv0 = R.add(x, x)",
    ]
    for i in range(1, n):
        if i % 2:
            lines.append(f"            lv{i} = R.matmul(lv{i - 1}, w)")
        else:
            lines.append(f"            lv{i} = R.add(lv{i - 1}, x)")
    lines.append(f"            R.output(lv{n - 1})")
    lines.append(f"        return lv{n - 1}")
    return "\n".join(lines) + "\n"


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(n: int, symbolic: bool, repeat: int, profile: bool) -> bool:
    mod = distir.parse(generate(n, symbolic))
    text = print_module(mod)  # canonical, fully annotated text
    t_parse, parsed = best_of(repeat, lambda: distir.parse(text))
    t_print, printed = best_of(repeat, lambda: print_module(parsed))
    t_infer, _ = best_of(repeat, lambda: distir.parse(generate(n, symbolic)))
    assert printed == text, "print(parse(text)) is not a fixed point"
    total = t_parse + t_print
    ok = total < BAR_SECONDS
    kind = "symbolic" if symbolic else "static"
    print(
        f"{kind:8s} {n:6d} bindings: parse {t_parse:.3f} s  print {t_print:.3f} s  "
        f"total {total:.3f} s  [{'under' if ok else 'OVER'} the {BAR_SECONDS:.0f} s bar]  "
        f"(parse without annotations, inferring every type: {t_infer:.3f} s)"
    )
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        print_module(distir.parse(text))
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindings", type=int, default=10_000, help="number of bindings (default 10000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept (default 3)")
    ap.add_argument("--only", choices=("static", "symbolic"), help="run one variant only")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one parse + print")
    args = ap.parse_args(argv)
    if args.bindings < 1:
        ap.error("--bindings must be at least 1")
    ok = True
    for symbolic in (False, True):
        if args.only and args.only != ("symbolic" if symbolic else "static"):
            continue
        ok &= run(args.bindings, symbolic, args.repeat, args.profile)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
