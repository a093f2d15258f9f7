#!/usr/bin/env python3
"""Bytes of the nn models shipped beside nn_llama (GPT-2, GQA, decode, MoE), per worker, at 1-4 workers.

    PYTHONPATH=python python scripts/bench_nn_models.py [--counts 1 2 3 4]

For each model and plan, on the simulator: the bytes each worker sends (all collectives of one
call, summed over the workers and divided by the count) and the bytes of weights each worker
holds (its blocks, padding included), at the default sizes of each model. The numbers in
docs/frontend.md come from here. Nothing is timed.
"""

from __future__ import annotations

import argparse

import numpy as np

from distir.driver import Driver
from distir.ir import sym
from distir.ir.layout import local_shape
from distir.ir.types import DTensorType, dtype_bytes
from distir.transform import PassContext, ShardParams
from distir.transform.weights import NUM_INPUT
from distir.tvm import from_nn
from distir.examples.nn import decode as D
from distir.examples.nn import gpt2 as G
from distir.examples.nn import gqa as Q
from distir.examples.nn import moe as M


def weight_bytes(driver: Driver, count: int) -> int:
    """Bytes of the weights one worker holds (worker 0: the largest block)."""
    f = driver.local[driver.func]
    values = driver.values(count) or {}
    total = 0
    for t in list(f.attrs["distir.global_params"])[int(f.attrs[NUM_INPUT]):]:
        shape = local_shape(t.shape, t.mesh, t.placement) if isinstance(t, DTensorType) else t.shape
        total += int(np.prod([sym.evaluate(d, values) for d in shape])) * dtype_bytes(t.dtype)
    return total


def row(name: str, driver: Driver, count: int, inputs, weights) -> str:
    r = driver.run(inputs, count, weights=weights)
    assert r.ok, (name, count, r.comparison.mismatch)
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(r.stats.counts.items())) or "none"
    return f"| {name} | {count} | {float(r.stats.bytes_per_worker):,.0f} | {weight_bytes(driver, count):,} | {kinds} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 3, 4])
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| model (plan) | workers | bytes sent per worker | weight bytes per worker | collectives |")
    print("| --- | --- | --- | --- | --- |")

    g = G.GPT2Config()
    model = G.GPT2(g)
    driver = Driver(ShardParams(G.TP_PLAN)(from_nn(model, G.spec(g))), func="forward")
    ids = rng.integers(0, g.vocab_size, (1, 16)).astype("int32")
    for n in args.counts:
        print(row("GPT-2, 16 tokens", driver, n, [ids], G.random_weights(model)))

    q = Q.GQAConfig()
    model = Q.GQALlama(q)
    mod = from_nn(model, Q.spec(q))
    ids = rng.integers(0, q.vocab_size, 16).astype("int32")
    for n in args.counts:
        d = Driver(ShardParams(Q.tp_plan(q, n), mesh=Q.mesh(n))(mod), func="forward")
        how = "KV cut" if Q.kv_heads_cut(q, n) else "KV replicated"
        print(row(f"GQA ({how}), 16 tokens", d, n, [ids, *Q.rope_tables(16, q.head_dim)], Q.random_weights(model)))

    c = D.DecodeConfig()
    model = D.DecoderLM(c)
    prefill = Driver(ShardParams(D.TP_PLAN)(from_nn(model, D.spec(c))), func="prefill")
    decode = prefill.for_function("decode")
    weights = D.random_weights(model)
    cos, sin = D.rope_tables(17, c.head_dim)
    ids = rng.integers(0, c.vocab_size, 16).astype("int32")
    cache = np.zeros((c.num_layers, c.num_kv_heads, 16, c.head_dim), "float32")
    for n in args.counts:
        print(row("prefill, 16 tokens", prefill, n, [ids, cos[:16], sin[:16]], weights))
        print(row("decode, 1 token after 16", decode, n, [ids[:1], cos[16:], sin[16:], cache, cache], weights))

    m = M.MoEConfig()
    model = M.MoE(m)
    mod = from_nn(model, M.spec(m))
    x = rng.standard_normal((16, m.hidden_size)).astype("float32")
    for name, plan in (("MoE (expert parallel)", M.EP_PLAN), ("MoE (tensor parallel)", M.TP_PLAN)):
        d = Driver(ShardParams(plan)(mod), func="forward")
        with PassContext(config={"propagate-sharding.size_hints": M.SIZE_HINTS}):
            d.local  # noqa: B018 - distributed under the hints
        for n in args.counts:
            print(row(f"{name}, 16 tokens", d, n, [x], M.random_weights(model)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
