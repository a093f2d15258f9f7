#!/usr/bin/env python3
"""Benchmark: propagate-sharding's whole-program solver (MILP, HiGHS) against the greedy choice.

Two tables, each timed in one run so the ratios compare like with like:

- the bundled models (``distir.examples`` mlp, attention, llama, and the relax.frontend.nn Llama of
  ``distir.examples.nn.llama`` laid out by its tensor-parallel plan): ``propagate-sharding`` with
  ``propagate-sharding.search`` = ``greedy`` and the default ``auto`` (the solver, its layout kept
  where it sends no more than the greedy one at every sampled size), and the whole distribute
  pipeline both ways, the best of ``--repeat`` runs after one to warm the planner's caches;
- ``distir.examples.llama_stack(n)`` (default n = 2, 8 and 80 layers): ``milp`` against
  ``greedy``, their ratio, the integer programs solved (a stack is solved in windows between
  layers, windows alike once), the bytes per worker the solver's layout sends at the size hints,
  and the whole distribute pipeline with the default search. The bar: the pipeline on 80 layers
  under 10 s. ``--no-milp-above N`` skips the solver for stacks of more than N layers.
"""

from __future__ import annotations

import argparse
import time
import warnings

from distir.examples import llama_stack, load
from distir.transform import PassContext, ShardParams, get_pass
from distir.transform.layout_choice.cost_model import CostModel
from distir.transform.layout_choice.propagate_sharding import ShardingAmbiguityWarning
from distir.transform.layout_choice.sharding_graph import build_graph, preferred_placements
from distir.transform.layout_choice.windows import solve_layouts
from distir.transform.pipelines import distribute_pipeline


def timed(run, mod, search: str) -> float:
    with warnings.catch_warnings(), PassContext(config={"propagate-sharding.search": search}):
        warnings.simplefilter("ignore", ShardingAmbiguityWarning)
        t0 = time.perf_counter()
        run(mod)
        return time.perf_counter() - t0


def propagate(mod):
    return get_pass("propagate-sharding")(mod)


def pipeline(mod):
    return distribute_pipeline()(mod)


def bundled_models():
    for name in ("mlp", "attention", "llama"):
        yield name, load(name)
    try:
        from distir.tvm import from_nn
        from distir.examples.nn import llama as L
    except ImportError:  # TVM not installed: the distir models only
        return
    config = L.LlamaConfig()
    yield "nn_llama", ShardParams(L.TP_PLAN)(from_nn(L.Llama(config), L.spec(config)))


def models_table(repeat: int) -> None:
    print(f"{'model':>10} {'what':>9} {'greedy s':>9} {'auto s':>9} {'auto/greedy':>11}")
    for name, mod in bundled_models():
        for what, run in (("propagate", propagate), ("pipeline", pipeline)):
            for s in ("greedy", "auto"):
                timed(run, mod, s)  # warm up
            best = {s: min(timed(run, mod, s) for _ in range(repeat)) for s in ("greedy", "auto")}
            print(f"{name:>10} {what:>9} {best['greedy']:9.3f} {best['auto']:9.3f} "
                  f"{best['auto'] / best['greedy']:11.1f}")


def stack_table(layers: list[int], no_milp_above: int) -> None:
    timed(propagate, llama_stack(1), "milp")  # warm up
    print(f"{'layers':>6} {'greedy s':>9} {'milp s':>9} {'milp/greedy':>11} {'programs':>8} {'milp B/worker':>14} "
          f"{'pipeline s':>10}")
    pipe = 0.0
    for n in layers:
        mod = llama_stack(n)
        greedy = timed(propagate, mod, "greedy")
        if n <= no_milp_above:
            milp = timed(propagate, mod, "milp")
            graph = build_graph(mod["main"])
            plan, solved = solve_layouts(graph, preferred_placements(graph), CostModel(graph))
            milp_s, ratio, sent = f"{milp:9.2f}", f"{milp / greedy:11.1f}", f"{int(plan.bytes):14,}"
            programs = f"{len(solved):>8}"
        else:
            milp_s, ratio, sent, programs = f"{'-':>9}", f"{'-':>11}", f"{'-':>14}", f"{'-':>8}"
        pipe = timed(pipeline, mod, "auto")
        print(f"{n:>6} {greedy:9.2f} {milp_s} {ratio} {programs} {sent} {pipe:10.2f}")
    print(f"pipeline on {layers[-1]} layers: {pipe:.2f} s ({'under' if pipe < 10 else 'OVER'} the 10 s bar)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="2,8,80", help="comma-separated layer counts (default 2,8,80)")
    ap.add_argument("--no-milp-above", type=int, default=1000, help="skip the solver above this many layers")
    ap.add_argument("--repeat", type=int, default=3, help="runs per model, the best reported (default 3)")
    ap.add_argument("--skip-models", action="store_true", help="only the stacks")
    args = ap.parse_args()
    if not args.skip_models:
        models_table(args.repeat)
        print()
    stack_table([int(s) for s in args.layers.split(",")], args.no_milp_above)


if __name__ == "__main__":
    main()
