#!/usr/bin/env python3
"""Benchmark: auto-shard against the hand-written Megatron plans at the user's sizes (issue 39, item 4).

For each model and device count: the bytes each worker sends and the peak live activations per
worker after ``distribute``, of auto-shard given the sizes (``AutoShard(sizes=...)``) and of the hand
plans: on the GPT-2 block (``distir.examples.nn.gpt2.block_module("split")``, b = 2, s = 10 and 64)
the plain colwise plan ``BLOCK_COLWISE_PLAN`` and the Megatron plan ``TP_PLAN`` (fused QKV in
blocks of q, k and v: ``S[0/3]``); on the Llama layer (``examples.load("llama")``, s = 64) its
annotated Megatron layout; on the MLP example its annotated layout. ``ok`` says auto-shard sends
no more than the best hand plan.

    python scripts/bench_auto_shard_megatron.py
"""

from __future__ import annotations

import warnings

from distir import examples
from distir.analysis import comm_volume, memory_footprint
from distir.examples.nn.gpt2 import BLOCK_COLWISE_PLAN, TP_PLAN, block_module
from distir.transform import AutoShard, PassContext, ShardParams
from distir.transform.layout_choice.auto_shard import strip_layouts
from distir.transform.pipelines import distribute_pipeline


def numbers(mod, env) -> tuple[int, int]:
    """(bytes each worker sends, peak live activations per worker) after distribute, at ``env``."""
    with warnings.catch_warnings(), PassContext(config={"propagate-sharding.size_hints": env}):
        warnings.simplefilter("ignore")
        local = distribute_pipeline()(mod)
    return int(comm_volume(local).evaluate(env).bytes_per_worker), int(memory_footprint(local).evaluate(env).peak_bytes)


def main() -> int:
    block = block_module("split")
    gpt2_plans = {"colwise": ShardParams(BLOCK_COLWISE_PLAN)(block),
                  "TP_PLAN": ShardParams({k: v for k, v in TP_PLAN.items() if k.startswith("h.")})(block)}
    llama = examples.load("llama")
    mlp = examples.load("mlp")
    cases = [(f"gpt2 block b=2 s={s}", block, {"b": 2, "s": s}, gpt2_plans) for s in (10, 64)]
    cases += [("llama layer s=64", strip_layouts(llama), {"s": 64}, {"megatron": llama}),
              ("mlp", strip_layouts(mlp), {}, {"megatron": mlp})]
    print("| model | W | auto-shard B/worker (peak) | hand plans B/worker (peak) | ok |")
    print("|---|---|---|---|---|")
    for name, plain, sizes, plans in cases:
        for w in (2, 4, 8):
            env = {**sizes, "num_workers": w}
            sent, peak = numbers(AutoShard(sizes=env)(plain), env)
            hand = {k: numbers(m, env) for k, m in plans.items()}
            best = min(b for b, _ in hand.values())
            text = ", ".join(f"{k} {b:,} ({p:,})" for k, (b, p) in hand.items())
            print(f"| {name} | {w} | {sent:,} ({peak:,}) | {text} | {'yes' if sent <= best else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
