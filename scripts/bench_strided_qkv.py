#!/usr/bin/env python3
"""The fused-QKV plans of docs/strided.md measured on GPT-2 blocks: bytes per worker of each plan.

    PYTHONPATH=python python scripts/bench_strided_qkv.py [--counts 2 4 8] [--batch 2] [--seq 10]

Two GPT-2 blocks written with ``relax.frontend.nn`` (fused QKV with bias, 4 heads of 16, MLP
colwise/rowwise): ``split`` (q, k, v cut off the fused projection by ``op.split``, as
``scripts/bench_pipeline.py`` writes it) and ``reshape`` (the projection reshaped to
``(b, s, 3, heads, head_dim)`` first, as ``distir.examples.nn.gpt2.GPT2`` writes it), both
``distir.examples.nn.gpt2.block_module``. Each is laid out by
the plain colwise plan (``c_attn`` ``S[0]``) and by the strided one (``S[0/3]``), distributed, run
on the simulator at each count and compared with one device; the bytes each worker sends are
printed. The numbers in docs/strided.md come from here. Nothing is timed.
"""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np

from distir.testing import assert_sharded_equivalent
from distir.transform import PassContext, ShardParams

HIDDEN, HEADS = 64, 4  # distir.examples.nn.gpt2.GPT2Config's


def block(form: str):
    """One GPT-2 block alone, without a layout (``distir.examples.nn.gpt2.block_module``)."""
    from distir.examples.nn.gpt2 import block_module

    return block_module(form)


def plan(qkv: str) -> dict[str, str]:
    from distir.examples.nn.gpt2 import BLOCK_COLWISE_PLAN

    return {**BLOCK_COLWISE_PLAN, "h.*.attn.c_attn.weight": qkv, "h.*.attn.c_attn.bias": qkv}


def inputs(mod, batch: int, seq: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = {"b": batch, "s": seq}
    out = []
    for p in mod["forward"].params:
        shape = [d if isinstance(d, int) else sizes[str(d)] for d in p.type.shape]
        out.append((rng.standard_normal(shape) / math.sqrt(shape[-1])).astype("float32"))
    return out


def measure(form: str, qkv: str, counts, batch: int, seq: int, hinted: bool) -> dict[int, int]:
    """Bytes per worker of one block laid out with ``qkv`` on the fused weight, per count; ``hinted``:
    propagation given the batch and sequence as ``size_hints``."""
    mod = ShardParams(plan(qkv))(block(form))
    config = {"propagate-sharding.size_hints": {"b": batch, "s": seq}} if hinted else {}
    with warnings.catch_warnings(), PassContext(config=config):
        warnings.simplefilter("ignore")
        stats = assert_sharded_equivalent(mod, inputs(mod, batch, seq), num_workers=counts, func="forward",
                                          rtol=1e-4, atol=1e-4)
    return {n: int(stats[n].bytes_per_worker) for n in counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=10)
    args = ap.parse_args(argv)
    print(f"bytes sent per worker, one GPT-2 block (hidden {HIDDEN}, {HEADS} heads), batch {args.batch}, "
          f"sequence {args.seq}")
    print("| form | c_attn | size_hints | " + " | ".join(f"{n} workers" for n in args.counts) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in args.counts) + " |")
    for hinted in (False, True):
        for form in ("split", "reshape"):
            for qkv in ("S[0]", "S[0/3]"):
                got = measure(form, qkv, args.counts, args.batch, args.seq, hinted)
                hints = f"b={args.batch}, s={args.seq}" if hinted else "none"
                print(f"| {form} | `{qkv}` | {hints} | " + " | ".join(f"{got[n]:,}" for n in args.counts) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
