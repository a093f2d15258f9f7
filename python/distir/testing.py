"""Checks for tests: does the distributed program compute what the single-device one does?

The work is :class:`distir.driver.Driver`'s; this module turns a mismatch into an
AssertionError naming the device count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from .driver import compare_outputs, random_inputs
from .ir.expr import IRModule
from .ir.op import OpDef, register_op, unregister_op
from .runtime.spmd import SpmdStats

__all__ = ["assert_sharded_equivalent", "compare_outputs", "random_inputs", "temporary_op"]


@contextmanager
def temporary_op(op: OpDef) -> Iterator[OpDef]:
    """Declare ``op`` for the ``with`` block only (a test's own op).

    The op registry is global: the op is removed again however the block ends, so that
    other tests (and docs/ops.md's tables) never see it.
    """
    register_op(op)
    try:
        yield op
    finally:
        unregister_op(op.name)


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
    from .driver import Driver

    d = Driver(mod, func=func, symbol=symbol, pipeline=pipeline)
    out: dict[int, SpmdStats] = {}
    for w in num_workers:
        r = d.run(inputs, {symbol: w}, seed=seed, rtol=rtol, atol=rtol if atol is None else atol,
                  absolute_atol=atol is not None)
        if not r.ok:
            raise AssertionError(f"{symbol}={w}: {r.comparison.mismatch}")
        out[w] = r.stats
    return out
