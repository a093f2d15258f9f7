#!/usr/bin/env python3
"""One program for every count against a program per count: bytes per worker, model x count.

    PYTHONPATH=python python scripts/bench_counts.py [--counts 1 2 3 4 6 8] [--models gqa,decode,moe,gpt2,llama] [--declare]

For each model and plan: the plan laid out once with ``num_workers`` symbolic and specialized to
each count, against the same plan laid out on a static 1-D mesh of that count (what distir does
when told the count), each run on the simulator and compared with one device (a mismatch stops
the script). With ``--declare`` the symbolic program is distributed with the counts declared
(``propagate-sharding.counts``: one layout per class of counts, docs/propagation.md); without it,
as a user who declares nothing gets it (planned for the default counts, 1 to 8). Printed per row: the bytes each worker sends (all
collectives of one call, summed over the workers, divided by the count) both ways, their ratio
(symbolic / static; above 1 is what the symbolic workflow costs), and XLA's figure where issue 39
gives one. No size hints anywhere: the question is what a user gets without them. Nothing is timed.
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable

import numpy as np

from distir.driver import Driver
from distir.transform import PassContext
from distir.ir import DeviceMesh
from distir.ir.mesh import Range
from distir.testing import assert_sharded_equivalent
from distir.transform import ShardParams

# issue 39's XLA column (bytes per worker): the GPT-2 block, fused QKV colwise, b=2, s=64
XLA_GPT2 = {2: 81_920, 4: 139_264, 8: 188_416}


def static_mesh(n: int) -> DeviceMesh:
    return DeviceMesh((n,), Range(0, n))


DECLARE = False  # --declare: the symbolic program is told the counts it is for


def nn_bytes(mod, plan, func: str, inputs, weights, counts) -> tuple[dict[int, float], dict[int, float]]:
    """(symbolic, static) bytes per worker of ``mod`` laid out by ``plan``, per count."""
    sym = Driver(ShardParams(plan)(mod), func=func, counts=counts if DECLARE else None)
    out_sym, out_static = {}, {}
    for n in counts:
        r = sym.run(inputs, n, weights=weights)
        assert r.ok, (func, "symbolic", n, r.comparison.mismatch)
        out_sym[n] = float(r.stats.bytes_per_worker)
        r = Driver(ShardParams(plan, mesh=static_mesh(n))(mod), func=func).run(inputs, n, weights=weights)
        assert r.ok, (func, "static", n, r.comparison.mismatch)
        out_static[n] = float(r.stats.bytes_per_worker)
    return out_sym, out_static


def gqa(counts):
    from distir.tvm import from_nn
    from distir.examples.nn import gqa as Q

    q = Q.GQAConfig()
    model = Q.GQALlama(q)
    plan = {**Q.tp_plan(q, q.num_kv_heads), "*.k_proj.weight": "colwise", "*.v_proj.weight": "colwise"}
    ids = np.random.default_rng(0).integers(0, q.vocab_size, 16).astype("int32")
    yield "GQA, k/v colwise, 16 tokens", nn_bytes(from_nn(model, Q.spec(q)), plan, "forward",
                                                  [ids, *Q.rope_tables(16, q.head_dim)], Q.random_weights(model), counts)


def decode(counts):
    from distir.tvm import from_nn
    from distir.examples.nn import decode as D

    c = D.DecodeConfig()
    model = D.DecoderLM(c)
    cos, sin = D.rope_tables(17, c.head_dim)
    ids = np.random.default_rng(0).integers(0, c.vocab_size, 1).astype("int32")
    cache = np.random.default_rng(1).standard_normal((c.num_layers, c.num_kv_heads, 16, c.head_dim)).astype("float32")
    yield "decode, cache S[1], 1 token after 16", nn_bytes(from_nn(model, D.spec(c)), D.TP_PLAN, "decode",
                                                          [ids, cos[16:], sin[16:], cache, cache],
                                                          D.random_weights(model), counts)


def moe(counts):
    from distir.tvm import from_nn
    from distir.examples.nn import moe as M

    m = M.MoEConfig()
    model = M.MoE(m)
    x = np.random.default_rng(0).standard_normal((16, m.hidden_size)).astype("float32")
    yield "MoE expert parallel, 16 tokens, no size hints", nn_bytes(from_nn(model, M.spec(m)), M.EP_PLAN, "forward",
                                                                   [x], M.random_weights(model), counts)


def gpt2(counts, batch: int = 2, seq: int = 64):
    from distir.examples.nn.gpt2 import BLOCK_COLWISE_PLAN, block_module

    for form in ("split", "reshape"):
        mod = block_module(form)
        rng = np.random.default_rng(0)
        inputs = []
        for p in mod["forward"].params:
            shape = [d if isinstance(d, int) else {"b": batch, "s": seq}[str(d)] for d in p.type.shape]
            inputs.append((rng.standard_normal(shape) / math.sqrt(shape[-1])).astype("float32"))
        sym = ShardParams(BLOCK_COLWISE_PLAN)(mod)
        with PassContext(config={"propagate-sharding.counts": list(counts)} if DECLARE else {}):
            got_sym = assert_sharded_equivalent(sym, inputs, num_workers=counts, func="forward", rtol=1e-4, atol=1e-4)
        got_static = {}
        for n in counts:
            static = ShardParams(BLOCK_COLWISE_PLAN, mesh=static_mesh(n))(mod)
            got_static[n] = assert_sharded_equivalent(static, inputs, num_workers=(n,), func="forward",
                                                      rtol=1e-4, atol=1e-4)[n]
        yield (f"GPT-2 block ({form}), c_attn colwise, b={batch}, s={seq} dynamic",
               ({n: float(got_sym[n].bytes_per_worker) for n in counts},
                {n: float(got_static[n].bytes_per_worker) for n in counts}), XLA_GPT2)


def llama(counts):
    """The bundled Llama layer (Megatron hints), s dynamic (s=16)."""
    from distir import examples
    from distir.driver import random_inputs
    from distir.script import parse

    text = examples.text("llama")
    mesh = 'R.device_mesh(("num_workers",), I.Range(0, "num_workers"))'
    assert mesh in text
    mod = examples.load("llama")
    inputs = random_inputs(mod, "main", {"s": 16})
    d = Driver(mod, counts=counts if DECLARE else None)
    out_sym, out_static = {}, {}
    for n in counts:
        r = d.run(inputs, n, rtol=1e-4, atol=1e-4)
        assert r.ok, ("llama", "symbolic", n, r.comparison.mismatch)
        out_sym[n] = float(r.stats.bytes_per_worker)
        static = Driver(parse(text.replace(mesh, f"R.device_mesh(({n},), I.Range(0, {n}))")))
        r = static.run(inputs, n, rtol=1e-4, atol=1e-4)
        assert r.ok, ("llama", "static", n, r.comparison.mismatch)
        out_static[n] = float(r.stats.bytes_per_worker)
    yield "Llama layer (Megatron hints), s=16 dynamic", (out_sym, out_static)


MODELS: dict[str, Callable] = {"gqa": gqa, "decode": decode, "moe": moe, "gpt2": gpt2, "llama": llama}


def llama70b(counts=(256, 1024), seq: int = 2048) -> None:
    """The Llama-70B-like layer (hidden 8192, 64 heads, FFN 28,672), sizes given (``size_hints``:
    the count and s=2048): bytes per worker of the default search against ``search="milp"``, read
    off the analysis' formulas of the module specialized to the count (too large to simulate)."""
    from distir.analysis import comm_volume
    from distir.examples import llama_stack
    from distir.ir import sym
    from distir.transform.pipelines import distribute_pipeline
    from distir.transform.specialize import specialize

    print("\n| Llama-70B-like layer, s=2048, sizes given | workers | default search MB/worker | milp MB/worker | steps (default) |")
    print("| --- | --- | --- | --- | --- |")
    mod = llama_stack(1, hidden=8192, heads=64, ffn=28672)
    for n in counts:
        got = {}
        for search in ("auto", "milp"):
            config = {"propagate-sharding.size_hints": {"num_workers": n, "s": seq}, "propagate-sharding.search": search}
            with warnings.catch_warnings(), PassContext(config=config):
                warnings.simplefilter("ignore")
                local = specialize(distribute_pipeline()(mod), {"num_workers": n, "s": seq})
            v = comm_volume(local)
            got[search] = (int(sym.evaluate(v.total_bytes, {})) / n / 1e6, v.counts)
        print(f"| layer | {n} | {got['auto'][0]:,.1f} | {got['milp'][0]:,.1f} | {got['auto'][1]} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--llama70b", action="store_true",
                    help="also the Llama-70B-like layer at 256 and 1024 workers: default search against milp")
    ap.add_argument("--declare", action="store_true",
                    help="declare the counts to the symbolic program (propagate-sharding.counts)")
    args = ap.parse_args(argv)
    global DECLARE
    DECLARE = args.declare
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    print("| model, plan | workers | symbolic B/worker | static mesh B/worker | symbolic / static | XLA |")
    print("| --- | --- | --- | --- | --- | --- |")
    worse = 0
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = list(MODELS[name](args.counts))
        for label, (got_sym, got_static), *xla in rows:
            for n in args.counts:
                s, t = got_sym[n], got_static[n]
                ratio = "-" if t == 0 and s == 0 else ("inf" if t == 0 else f"{s / t:.2f}")
                worse += s > t
                ref = f"{xla[0][n]:,}" if xla and n in xla[0] else ""
                print(f"| {label} | {n} | {s:,.0f} | {t:,.0f} | {ratio} | {ref} |")
    print(f"\nrows where the symbolic program sends more than the static one: {worse}")
    if args.llama70b:
        llama70b()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
