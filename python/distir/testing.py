"""Checks for tests: does the distributed program compute what the single-device one does?"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from .errors import DistirError
from .ir.expr import IRModule
from .ir.op import OpDef, register_op, unregister_op
from .runtime.spmd import SpmdStats, run_spmd
from .transform.specialize import specialize

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


def random_inputs(
    mod: IRModule,
    func: str = "main",
    dims: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
    default_dim: int = 16,
    int_high: int = 4,
) -> list[np.ndarray]:
    """Random global inputs for ``func``'s parameters (its global signature when lowered).

    Symbolic dims take their value from ``dims``, else ``default_dim``. Floats are standard
    normal scaled by 0.5 (keeps softmax and silu in range); integers are uniform in
    ``[0, int_high)`` (valid indices into any table with at least that many rows); bools are
    fair coins.
    """
    from .ir import sym
    from .ir.types import DTensorType, TensorType
    from .ops._common import np_dtype
    from .transform.lower_to_local import GLOBAL_PARAMS

    if func not in mod.functions:
        raise DistirError(f"no function '{func}' in the module (it has: {', '.join(mod.functions)})")
    f = mod[func]
    types = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
    rng = np.random.default_rng(seed)
    values = dict(dims or {})
    out = []
    for p, t in zip(f.params, types):
        if not isinstance(t, (TensorType, DTensorType)):
            raise DistirError(f"parameter '{p.name}' of '{func}' is {t}; random inputs exist for tensors only")
        env = {name: values.get(name, default_dim) for d in t.shape for name in sym.free_vars(d)}
        shape = tuple(sym.evaluate(d, env) for d in t.shape)
        dtype = np_dtype(t.dtype)
        if t.dtype == "bool":
            out.append(rng.random(shape) < 0.5)
        elif np.issubdtype(np.dtype(dtype), np.integer):
            out.append(rng.integers(0, int_high, shape).astype(dtype))
        else:
            out.append((rng.standard_normal(shape) * 0.5).astype(dtype))
    return out


def compare_outputs(got, expected, rtol: float = 1e-5, atol: float = 1e-5) -> tuple[bool, float]:
    """(every output matches, largest absolute difference); ``atol`` scales with the largest expected value."""
    got, expected = _as_tuple(got), _as_tuple(expected)
    ok, worst = len(got) == len(expected), 0.0
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return False, float("inf")
        if e.dtype == bool or g.dtype == bool:
            diff = float(np.count_nonzero(g != e))
            ok &= diff == 0
        else:
            g64, e64 = g.astype(np.float64), e.astype(np.float64)
            scale = float(np.max(np.abs(e64))) if e64.size else 0.0
            diff = float(np.max(np.abs(g64 - e64))) if e64.size else 0.0
            ok &= bool(np.allclose(g64, e64, rtol=rtol, atol=atol * max(scale, 1e-30), equal_nan=True))
        worst = max(worst, diff)
    return ok, worst


def _as_tuple(x) -> tuple:
    """The arrays of an output, nested tuples flattened in order."""
    if isinstance(x, tuple):
        return tuple(a for f in x for a in _as_tuple(f))
    return (x,)


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
