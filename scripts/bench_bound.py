#!/usr/bin/env python3
"""Benchmark: bytes per device of layout changes against the communication bound, and planner time.

For each layout change of a suite (2-D swaps, gathers and all-to-alls that do not divide,
reshapes that split or merge a sharded dim, a partial value), the program is distributed once
with ``num_workers`` symbolic (the planner's time is that run, with its plan cache emptied
first), specialized to each count, run on the SPMD simulator, checked against one device,
and its bytes are compared with the bound computed here from the block rule alone. The
``static`` column plans the same program on a mesh whose sizes are constants (the planner then
counts the padding of uneven blocks and takes block exchanges where those move less). With
``num_workers`` symbolic, legalize writes the plan made for every count (blocks taken to divide)
where it is the exact optimum at every count up to 8, and leaves the others to ``specialize``
(``R.ccl.replan``), which plans for the count it binds; the ``every count`` column runs the plan
made for every count instead, as before re-planning. The bound:

- without partials, each device receives at least the real elements of its target block it
  does not hold;
- from a partial value on a 1-D mesh, each device receives at least the other devices'
  contributions to the real elements of its target block.

Run: ``PYTHONPATH=python python scripts/bench_bound.py`` (docs/redistribute.md has its output).
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

import distir
from distir.runtime import run
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform.legalize_redistribute import expand_replans
from distir.transform.pipelines import distribute_pipeline
from distir.transform.redistribute_plan import _needs_replan, _plan_cached
from distir.transform.specialize import specialize

REDISTRIBUTE = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(({mesh}), I.Range(0, "{devices}"))]}})

    @R.function
    def main(x: R.DTensor(({a}), "float32", "mesh[0]", "{src}")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{dst}")
            R.output(y)
        return y
'''

RESHAPE = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(({mesh}), I.Range(0, "{devices}"))]}})

    @R.function
    def main(x: R.DTensor(({a}), "float32", "mesh[0]", "{src}")):
        with R.dataflow():
            r = R.reshape(x, R.shape([{b}]))
            y = R.dist.annotate_sharding(r, device_mesh="mesh[0]", placement="{dst}")
            R.output(y)
        return y
'''

ONE_D = ('"num_workers",', "num_workers")
TWO_D = ('2, "num_workers"', "2 * num_workers")

# (name, mesh, source shape, source layout, target shape or None, target layout, counts)
SUITE = [
    ("swap mesh axes", TWO_D, (16, 32), "S[0], S[1]", None, "S[1], S[0]", (2, 4)),
    ("move a dim to the other axis", TWO_D, (128, 64), "S[0], R", None, "R, S[0]", (2, 4)),
    ("gather a dim cut twice", TWO_D, (128, 64), "S[0], S[0]", None, "R, R", (2, 4)),
    ("gather, even", ONE_D, (128, 64), "S[0]", None, "R", (4, 8)),
    ("gather, uneven", ONE_D, (10, 16), "S[0]", None, "R", (3, 4)),
    ("all-to-all, even", ONE_D, (128, 64), "S[0]", None, "S[1]", (4, 8)),
    ("all-to-all, uneven", ONE_D, (10, 6), "S[0]", None, "S[1]", (4, 7)),
    ("split heads", ONE_D, (64, 48), "S[1]", (64, 3, 16), "S[2]", (4, 8)),
    ("reshape (12, 8) -> (16, 6)", ONE_D, (12, 8), "S[1]", (16, 6), "S[0]", (4,)),
    ("merge heads, uneven", ONE_D, (8, 6, 16), "S[1]", (8, 96), "S[1]", (4,)),
    ("partial to shard, even", ONE_D, (128, 64), "P", None, "S[0]", (4,)),
    ("partial to shard, uneven", ONE_D, (10, 16), "P", None, "S[0]", (4,)),
]


# ---------------------------------------------------------------- the bound, from the block rule


def _interval(n: int, cuts: list[int], coords: list[int]) -> tuple[int, int]:
    """Real elements [lo, hi) of a dim of n cut by nested counts, at those coordinates."""
    lo, hi, block = 0, n, n
    for k, c in zip(cuts, coords):
        block = -(-block // k)
        lo, hi = lo + c * block, min(hi, lo + (c + 1) * block)
    return lo, max(lo, hi)


def _held(shape, layout: str, sizes, coords) -> set[int]:
    specs = [s.strip() for s in layout.split(",")]
    index = np.arange(math.prod(shape)).reshape(shape)
    cut = []
    for d, n in enumerate(shape):
        axes = [a for a, s in enumerate(specs) if s == f"S[{d}]"]
        lo, hi = _interval(n, [sizes[a] for a in axes], [coords[a] for a in axes])
        cut.append(slice(lo, hi))
    return set(index[tuple(cut)].reshape(-1).tolist())


def bound(src_shape, src, dst_shape, dst, sizes, itemsize: int) -> int:
    """Bytes received by all devices together, at least (see the module docstring)."""
    total = 0
    for coords in itertools.product(*(range(s) for s in sizes)):
        want = _held(dst_shape, dst, sizes, coords)
        if src.strip().startswith("P"):
            total += (math.prod(sizes) - 1) * len(want)
        else:
            total += len(want - _held(src_shape, src, sizes, coords))
    return total * itemsize


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    print(f"{'layout change':30} {'mesh':>6} {'plan at the count':22} {'bytes/dev':>9} {'bound':>7} {'ratio':>6} "
          f"{'every count':>11} {'ratio':>6} {'static':>7} {'ratio':>6} {'planner':>8}")
    for name, (mesh, devices), a, src, b, dst, counts in SUITE:
        template = REDISTRIBUTE if b is None else RESHAPE
        text = template.format(mesh=mesh, devices=devices, a=", ".join(map(str, a)), b=", ".join(map(str, b or ())),
                               src=src, dst=dst)
        mod = distir.parse(text)
        _plan_cached.cache_clear()
        _needs_replan.cache_clear()
        t0 = time.perf_counter()
        local = distribute_pipeline()(mod)
        planner = time.perf_counter() - t0
        uniform = local.replace(functions={k: expand_replans(f, exact_only=False) for k, f in local.functions.items()})
        x = np.random.default_rng(0).standard_normal(a).astype("float32")
        expected = run(mod, x)
        for n in counts:
            sizes = (n,) if mesh == ONE_D[0] else (2, n)
            stats = SpmdStats()
            got = run_spmd(specialize(local, {"num_workers": n}), x, stats=stats)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            best = bound(a, src, b or a, dst, sizes, 4)
            devs = math.prod(sizes)
            plan = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(stats.counts.items())) or "-"
            every = SpmdStats()
            got = run_spmd(specialize(uniform, {"num_workers": n}), x, stats=every)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            fixed = text.replace(mesh, ", ".join(map(str, sizes)) + ("," if len(sizes) == 1 else ""))
            fixed = fixed.replace(f'"{devices}"', str(devs))
            static = SpmdStats()
            got = run_spmd(distribute_pipeline()(distir.parse(fixed)), x, stats=static)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            mesh_text = "x".join(map(str, sizes))
            print(f"{name:30} {mesh_text:>6} {plan:22} {stats.total_bytes / devs:9.0f} {best / devs:7.0f} "
                  f"{_ratio(stats.total_bytes, best):>6} {every.total_bytes / devs:11.0f} {_ratio(every.total_bytes, best):>6} "
                  f"{static.total_bytes / devs:7.0f} "
                  f"{_ratio(static.total_bytes, best):>6} {planner * 1e3:6.1f}ms")


def _ratio(got: int, best: int) -> str:
    return f"{got / best:.2f}" if best else ("1.00" if got == 0 else "inf")


if __name__ == "__main__":
    main()
