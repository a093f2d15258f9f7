#!/usr/bin/env python3
"""Benchmark: the distribute pipeline on Llama-like stacks and GPT-2 blocks, and against JAX.

- ``distir.examples.llama_stack(n)`` for n = 8, 32, 80 layers (80 layers is several thousand
  bindings): each pass of ``distribute_pipeline()`` (propagate-sharding, legalize-redistribute,
  canonicalize, lower-global-view-to-local-view) with num_workers symbolic, best of
  ``--repeat`` runs. The time per binding shows how it grows (a flat column is linear growth).
- GPT-2-style blocks written with ``relax.frontend.nn`` (LayerNorm, fused QKV projection with
  bias split into q, k and v, 4 heads, causal softmax, GELU MLP, residuals; batch and sequence
  dynamic), laid out by ``ShardParams`` (QKV and the MLP's first layer colwise, the projections
  rowwise): the same pipeline at 2, 4, 6 and 12 blocks, and the time per block.
- When JAX is installed (it is not a dependency of distir; ``pip install "jax[cpu]"``): the same
  Llama-like stack written in JAX, its weights laid out Megatron style on 4 CPU devices
  (``NamedSharding``), timed from ``jax.jit(...).lower`` through ``.compile()`` (XLA's SPMD
  partitioner and compiler), best of ``--repeat``; and distir's pipeline time over it.
- The bundled Llama layer on a mesh with an axis of one device (``(num_workers, 1)`` and
  ``(1, num_workers)``, every layout given ``R`` along it) against the same layer on
  ``(num_workers,)``: the same program, so the ratio should be near 1 (``--unit-axis``; it was
  about 100x while such an axis multiplied every op's strategies by four).

Run it against an older commit in one run with ``scripts/bench_compare.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
import warnings

import numpy as np

import distir
from distir import examples
from distir.examples import llama_stack
from distir.transform import PassContext
from distir.transform.instruments import PassTimingInstrument
from distir.transform.pipelines import distribute_pipeline

HIDDEN, HEADS, FFN = 128, 8, 256  # llama_stack's defaults
JAX_DEVICES = 4
JAX_SEQ = 64


def cold() -> None:
    """Forget the layout programs solved so far in this process (each run timed solves its own;
    older commits, which remember none, have nothing to forget)."""
    try:
        from distir.transform.layout_choice.solution import forget_solved
    except ImportError:
        return
    forget_solved()


def run(n_layers: int) -> tuple[int, float, float, dict[str, float]]:
    cold()
    t0 = time.perf_counter()
    made = llama_stack(n_layers)
    mod = distir.parse(made) if isinstance(made, str) else made  # IR text on older commits (bench_compare)
    t1 = time.perf_counter()
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        distribute_pipeline()(mod)
    t2 = time.perf_counter()
    bindings = sum(1 for f in mod.functions.values() for _ in f.bindings())
    return bindings, t1 - t0, t2 - t1, {t.name: t.seconds for t in timing.timings}


def unit_axis_text(mesh: str) -> str:
    """The bundled Llama layer on ``mesh`` (``"num_workers", 1`` or ``1, "num_workers"``), each
    layout given ``R`` along the axis of one device."""
    text = examples.text("llama").replace('("num_workers",)', f"({mesh})")
    given = r'(placement=|"mesh\[0\]", )"([^"]*)"'
    if mesh.endswith("1"):
        return re.sub(given, lambda m: f'{m.group(1)}"{m.group(2)}, R"', text)
    return re.sub(given, lambda m: f'{m.group(1)}"R, {m.group(2)}"', text)


def run_text(text: str) -> float:
    cold()
    mod = distir.parse(text)
    t0 = time.perf_counter()
    distribute_pipeline()(mod)
    return time.perf_counter() - t0


def best(fn, repeat: int):
    """The run of ``fn()`` (returning its seconds first) with the fewest seconds."""
    return min((fn() for _ in range(repeat)), key=lambda r: r[0] if isinstance(r, tuple) else r)


# ---------------------------------------------------------------------------------------------
# GPT-2 blocks written with relax.frontend.nn


def gpt2_module(n_layers: int, hidden: int = 64, heads: int = 4):
    """``n_layers`` GPT-2 blocks as a relax.frontend.nn model, imported and laid out colwise/rowwise."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    from distir.transform import ShardParams
    from distir.tvm import from_nn

    head_dim = hidden // heads

    class Attention(nn.Module):
        def __init__(self):
            self.c_attn = nn.Linear(hidden, 3 * hidden, bias=True)
            self.c_proj = nn.Linear(hidden, hidden, bias=True)

        def forward(self, x):
            b, s = x.shape[0], x.shape[1]
            q, k, v = op.split(self.c_attn(x), 3, axis=2)
            q = op.permute_dims(op.reshape(q, (b, s, heads, head_dim)), [0, 2, 1, 3])
            k = op.permute_dims(op.reshape(k, (b, s, heads, head_dim)), [0, 2, 3, 1])
            v = op.permute_dims(op.reshape(v, (b, s, heads, head_dim)), [0, 2, 1, 3])
            scores = op.matmul(q, k) * (1.0 / math.sqrt(head_dim))
            mask = op.triu(op.full((s, s), -1e9, dtype="float32"), diagonal=1)
            ctx = op.permute_dims(op.matmul(op.softmax(scores + mask, axis=-1), v), [0, 2, 1, 3])
            return self.c_proj(op.reshape(ctx, (b, s, hidden)))

    class MLP(nn.Module):
        def __init__(self):
            self.c_fc = nn.Linear(hidden, 4 * hidden, bias=True)
            self.c_proj = nn.Linear(4 * hidden, hidden, bias=True)

        def forward(self, x):
            return self.c_proj(op.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            self.ln_1, self.attn = nn.LayerNorm(hidden), Attention()
            self.ln_2, self.mlp = nn.LayerNorm(hidden), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self):
            self.h = nn.ModuleList([Block() for _ in range(n_layers)])

        def forward(self, x):
            for block in self.h:
                x = block(x)
            return x

    plan = {"h.*.attn.c_attn.weight": "S[0]", "h.*.attn.c_attn.bias": "S[0]", "h.*.attn.c_proj.weight": "S[1]",
            "h.*.mlp.c_fc.weight": "S[0]", "h.*.mlp.c_fc.bias": "S[0]", "h.*.mlp.c_proj.weight": "S[1]"}
    mod = from_nn(GPT2(), {"forward": {"x": nn.spec.Tensor(["b", "s", hidden], "float32")}})
    return ShardParams(plan)(mod)


def run_gpt2(n_layers: int) -> float:
    mod = gpt2_module(n_layers)
    cold()
    t0 = time.perf_counter()
    distribute_pipeline()(mod)
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# the same Llama-like stack in JAX


def jax_compile_seconds(n_layers: int) -> float | None:
    """Seconds from ``jax.jit(...).lower`` through ``.compile()`` of the stack on 4 CPU devices
    with Megatron shardings; None when JAX is not installed."""
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={JAX_DEVICES}")
    try:
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P
    except ImportError:
        return None
    if len(jax.devices()) < JAX_DEVICES:
        return None
    mesh = Mesh(np.array(jax.devices()[:JAX_DEVICES]), ("x",))
    s, hd = JAX_SEQ, HIDDEN // HEADS
    half, scale = hd // 2, 1.0 / math.sqrt(hd)

    def rms(v, g):
        return v * jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-5) * g

    def rotate(t, cos, sin):
        return t * cos + jnp.concatenate([-t[..., half:], t[..., :half]], axis=-1) * sin

    def layer(x, w, cos, sin, mask):
        hn = rms(x, w["attn_norm"])
        q, k, v = ((hn @ w[n]).reshape(s, HEADS, hd) for n in ("wq", "wk", "wv"))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        probs = jax.nn.softmax(jnp.einsum("shd,thd->hst", q, k) * scale + mask, axis=-1)
        h = x + jnp.einsum("hst,thd->shd", probs, v).reshape(s, HIDDEN) @ w["wo"]
        mn = rms(h, w["mlp_norm"])
        return h + (jax.nn.silu(mn @ w["w_gate"]) * (mn @ w["w_up"])) @ w["w_down"]

    def model(x, cos, sin, weights):
        mask = jnp.triu(jnp.full((s, s), -1e9, jnp.float32), 1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        for w in weights:
            x = layer(x, w, cos, sin, mask)
        return x

    def arg(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    specs = {"attn_norm": ((HIDDEN,), P()), "wq": ((HIDDEN, HIDDEN), P(None, "x")),
             "wk": ((HIDDEN, HIDDEN), P(None, "x")), "wv": ((HIDDEN, HIDDEN), P(None, "x")),
             "wo": ((HIDDEN, HIDDEN), P("x", None)), "mlp_norm": ((HIDDEN,), P()),
             "w_gate": ((HIDDEN, FFN), P(None, "x")), "w_up": ((HIDDEN, FFN), P(None, "x")),
             "w_down": ((FFN, HIDDEN), P("x", None))}
    weights = [{n: arg(*specs[n]) for n in specs} for _ in range(n_layers)]
    args = (arg((s, HIDDEN), P()), arg((s, hd), P()), arg((s, hd), P()), weights)
    t0 = time.perf_counter()
    jax.jit(lambda *a: model(*a)).lower(*args).compile()  # a new function each time: nothing is cached
    return time.perf_counter() - t0


def main() -> None:
    warnings.simplefilter("ignore")  # the timings are the output (the GPT-2 blocks warn of ties once per block)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8,32,80", help="comma-separated layer counts (default 8,32,80)")
    ap.add_argument("--gpt2", default="2,4,6,12", help="GPT-2 block counts (default 2,4,6,12; '' to skip)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept (default 3)")
    ap.add_argument("--no-jax", action="store_true", help="skip the comparison with JAX")
    ap.add_argument("--unit-axis", action="store_true",
                    help="only the Llama layer on meshes with an axis of one device against the 1-D mesh")
    args = ap.parse_args()
    if args.unit_axis:
        plain = min(run_text(examples.text("llama")) for _ in range(args.repeat))
        print(f"{'mesh':<20} {'pipeline s':>10} {'vs (num_workers,)':>18}")
        print(f"{'(num_workers,)':<20} {plain:>10.3f} {1:>18.2f}")
        for mesh in ('"num_workers", 1', '1, "num_workers"'):
            secs = min(run_text(unit_axis_text(mesh)) for _ in range(args.repeat))
            print(f"{'(' + mesh.replace(chr(34), '') + ')':<20} {secs:>10.3f} {secs / plain:>18.2f}", flush=True)
        return
    sizes = [int(s) for s in args.layers.split(",") if s]
    run(2)  # warm up: first-use costs (op registry, TVM's analyzer) are not per binding
    rows = []
    print(f"{'layers':>6} {'bindings':>8} {'build s':>8} {'pipeline s':>10} {'us/binding':>10}  per pass (s)")
    for n in sizes:
        bindings, build_s, pipe_s, passes = min((run(n) for _ in range(args.repeat)), key=lambda r: r[2])
        per = pipe_s / bindings * 1e6
        rows.append((n, bindings, pipe_s, per))
        detail = ", ".join(f"{k} {v:.2f}" for k, v in passes.items() if k != "distribute")
        print(f"{n:>6} {bindings:>8} {build_s:>8.2f} {pipe_s:>10.2f} {per:>10.1f}  {detail}", flush=True)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"time per binding, {last[0]} layers / {first[0]} layers: {last[3] / first[3]:.2f} (1.00 = linear)")
    gpt2 = [int(s) for s in args.gpt2.split(",") if s]
    if gpt2:
        run_gpt2(1)  # warm up
        print(f"\n{'blocks':>6} {'GPT-2 s':>8} {'s/block':>8}")
        for n in gpt2:
            secs = min(run_gpt2(n) for _ in range(args.repeat))
            print(f"{n:>6} {secs:>8.2f} {secs / n:>8.3f}", flush=True)
    if args.no_jax or not sizes:
        return
    if jax_compile_seconds(1) is None:
        print("\nJAX is not installed (pip install \"jax[cpu]\"): no comparison")
        return
    print(f"\n{'layers':>6} {'distir s':>9} {'JAX lower+compile s':>20} {'distir/JAX':>10}   (JAX: {JAX_DEVICES} CPU devices, s = {JAX_SEQ})")
    for n, _bindings, pipe_s, _per in rows:
        jax_s = min(jax_compile_seconds(n) for _ in range(args.repeat))
        print(f"{n:>6} {pipe_s:>9.2f} {jax_s:>20.2f} {pipe_s / jax_s:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
