"""Checks for tests: does the distributed program compute what the single-device one does?"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ir.expr import IRModule
from .runtime.spmd import SpmdStats, run_spmd
from .transform.specialize import specialize

__all__ = ["assert_sharded_equivalent"]


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_sharded_equivalent(
    mod: IRModule,
    inputs: Sequence[np.ndarray],
    num_workers: Sequence[int] = (1, 2, 4, 8),
    *,
    func: str = "main",
    symbol: str = "num_workers",
    pipeline=None,
    rtol: float = 1e-5,
    atol: float | None = None,
    seed: int = 0,
) -> dict[int, SpmdStats]:
    """Run the distribute pipeline ONCE (symbolic), specialize it to each count, simulate, compare.

    The reference is :func:`distir.runtime.run` on ``mod`` itself. Raises AssertionError
    naming the device count and output that differ. Returns each count's SpmdStats.
    ``atol`` defaults to ``rtol`` times the output's largest magnitude: sharded sums add in
    another order, so float32 results differ by rounding relative to the output's scale.
    """
    from .runtime import run
    from .transform.pipelines import distribute_pipeline

    expected = _as_tuple(run(mod, *inputs, func=func))
    lowered = (pipeline or distribute_pipeline())(mod)
    out: dict[int, SpmdStats] = {}
    for w in num_workers:
        local = specialize(lowered, {symbol: w})
        stats = SpmdStats()
        got = _as_tuple(run_spmd(local, *inputs, func=func, stats=stats, seed=seed))
        if len(got) != len(expected):
            raise AssertionError(f"{symbol}={w}: {len(got)} outputs, expected {len(expected)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            g, e = np.asarray(g), np.asarray(e)
            if g.shape != e.shape:
                raise AssertionError(f"{symbol}={w}: output {i} has shape {g.shape}, expected {e.shape}")
            scale = float(np.max(np.abs(e.astype(np.float64)))) if e.size else 0.0
            tol = atol if atol is not None else rtol * max(scale, 1e-30)
            if not np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=tol):
                diff = float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
                raise AssertionError(
                    f"{symbol}={w}: output {i} differs from the single-device result (max abs difference {diff:g}, "
                    f"largest |value| {scale:g})"
                )
        out[w] = stats
    return out
