"""Comparing a run with one device: the inputs a case runs on (extreme values for the dtype cases), and a tolerance that allows for rounding."""

from __future__ import annotations

from .dtypes import FLOAT_DTYPES


def extreme_inputs(mod, dims: dict, seed: int) -> list:
    """Inputs for --dtypes: integers anywhere in their range, each dtype's ends (smallest, largest,
    0, 1, -1) in every tensor; fair bools; floats of moderate size (a float's partial sums are held
    in its dtype, so values near its largest would overflow where one device's float64 sum does
    not: a difference of float arithmetic, not of distribution) with exact zeros, ones and halves."""
    import numpy as np

    from distir.driver import random_inputs
    from distir.ir.types import np_dtype

    rng = np.random.default_rng(seed)
    out = []
    for x in random_inputs(mod, "main", dims, seed=seed):  # the shapes and dtypes of the signature
        dtype = str(x.dtype)
        if dtype == "bool":
            out.append(rng.random(x.shape) < 0.5)
            continue
        t = np_dtype(dtype)
        if dtype in FLOAT_DTYPES:
            v = (rng.standard_normal(x.shape) * rng.choice([0.5, 2.0, 8.0])).astype(t)
            ends = [0.0, 1.0, -1.0, 0.5, -0.0]
        else:
            info = np.iinfo(t)
            v = rng.integers(info.min, info.max, x.shape, endpoint=True, dtype=t)
            ends = [info.min, info.max, 0, 1, info.max - 1] + ([-1] if info.min < 0 else [])
        flat = v.reshape(-1)
        for i, e in enumerate(ends[: flat.size]):
            flat[rng.integers(flat.size) if i else 0] = np.array(e).astype(t)
        out.append(flat.reshape(x.shape))
    return out


def case_inputs(mod, prog, dims: dict, seed: int) -> list:
    """The inputs of a case: at each dtype's ends for --dtypes cases, else distir's random inputs."""
    from distir.driver import random_inputs

    if getattr(prog, "values", "") == "extreme":
        return extreme_inputs(mod, dims, seed)
    return random_inputs(mod, "main", dims, seed=seed)


HALF_EPS = 2.0 ** -10  # float16's; bfloat16's is 2^-7


def compare_case(prog, got, expected, inputs, rtol: float, atol: float) -> tuple[bool, float]:
    """:func:`_compare`; for --dtypes cases, integers and bools exactly and half floats within their
    rounding (a few units of their last place, relative to the inputs' and the result's scale)."""
    import ml_dtypes
    import numpy as np

    if getattr(prog, "values", "") != "extreme":
        return _compare(got, expected, inputs, rtol, atol)
    g, e = _flat(got), _flat(expected)
    if len(g) != len(e):
        return False, float("inf")
    ok, worst = True, 0.0
    scale = max([float(np.max(np.abs(np.asarray(a, np.float64)))) for a in inputs if np.asarray(a).size
                 and str(np.asarray(a).dtype) in FLOAT_DTYPES] or [1.0])
    for a, b in zip(g, e):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        if str(b.dtype) not in FLOAT_DTYPES:
            wrong = a != b
            ok &= not bool(np.any(wrong))
            worst = max(worst, float(np.count_nonzero(wrong)))
            continue
        # the precision of the coarsest float the program computes in (a float16 sum cast to float64
        # holds float16's rounding)
        eps = max([float(ml_dtypes.finfo(b.dtype).eps)] + [float(ml_dtypes.finfo(np.asarray(x).dtype).eps)
                                                            for x in inputs if str(np.asarray(x).dtype) in FLOAT_DTYPES])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # at the edge of the range: one run overflows where the other, rounded another way, stays
        # within a factor 2 of the largest finite value (exp amplifies a last-place difference)
        edge = float(ml_dtypes.finfo(b.dtype).max) / 2
        with np.errstate(invalid="ignore"):
            tipped = ((np.isinf(b64) & (np.abs(a64) >= edge)) | (np.isinf(a64) & (np.abs(b64) >= edge))) \
                & (np.sign(a64) == np.sign(b64))
        # past the range: where one device's result overflowed, the order of a distributed sum
        # decides between inf and nan (inf * a + inf * b with a, b of opposite signs); both are
        # an overflow, not a number distribution got wrong
        tipped |= ~np.isfinite(b64) & ~np.isfinite(a64) & ~(np.isinf(a64) & np.isinf(b64) & (a64 != b64))
        if eps >= HALF_EPS and not np.all(np.isfinite(b64)):
            # a half float program that overflows on one device too: partial sums held in the dtype
            # overflow in another order (+inf on one worker, -inf on another: nan where one
            # device's wider sum stays finite), as in any all-reduce of that dtype
            tipped |= ~np.isfinite(a64) & np.isfinite(b64)
        a64 = np.where(tipped, b64, a64)
        top = max(scale, float(np.max(np.abs(np.nan_to_num(b64, posinf=0, neginf=0)), initial=0.0)))
        with np.errstate(invalid="ignore"):
            diff = np.abs(a64 - b64)
            worst = max(worst, float(np.nanmax(diff, initial=0.0)))
            close = np.isclose(a64, b64, rtol=max(rtol, 16 * eps), atol=max(atol, 16 * eps) * top, equal_nan=True)
            if eps >= HALF_EPS:
                # exp(x) turns x's last-place rounding (1/4 at x = 59 in bfloat16) into a relative
                # difference of x times it: compare the exponents of large values at that precision
                big = (np.abs(b64) > 1) & (np.abs(a64) > 1) & (np.sign(a64) == np.sign(b64))
                la, lb = np.log(np.abs(np.where(big, a64, 1.0))), np.log(np.abs(np.where(big, b64, 1.0)))
                close |= big & (np.abs(la - lb) <= 16 * eps * np.maximum(la, lb))
            ok &= bool(np.all(close))
    return ok, worst


def _compare(got, expected, inputs, rtol: float, atol: float) -> tuple[bool, float]:
    """compare_outputs, with the absolute tolerance scaled by the inputs' magnitude as well as the
    result's: ``x - mean(x, x, x)`` is 0 in exact arithmetic but about 1e-8 in float32, and a result
    of zeros gives the result's scale no room at all."""
    import numpy as np

    from distir.driver import compare_outputs

    ok, worst = compare_outputs(got, expected, rtol, atol)
    if ok:
        return ok, worst
    scale = max([float(np.max(np.abs(np.asarray(a, np.float64)))) for a in inputs if np.asarray(a).size] or [0.0])
    floats = all(np.issubdtype(np.asarray(e).dtype, np.floating) for e in _flat(expected))
    if floats and scale > 0 and worst <= atol * scale:
        g, e = _flat(got), _flat(expected)
        ok = len(g) == len(e) and all(
            np.asarray(a).shape == np.asarray(b).shape
            and np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol * scale)
            for a, b in zip(g, e)
        )
    return ok, worst


def _flat(x) -> tuple:
    return tuple(a for f in x for a in _flat(f)) if isinstance(x, tuple) else (x,)


def _differences(got, expected, np) -> str:
    from distir.driver import flat_outputs

    got, expected = flat_outputs(got), flat_outputs(expected)
    lines = []
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            lines.append(f"output {i}: shape {g.shape}, expected {e.shape}")
            continue
        bad = ~np.isclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-4,
                          atol=1e-4 * max(float(np.max(np.abs(e))) if e.size else 0.0, 1e-30), equal_nan=True)
        if bad.any():
            idx = np.argwhere(bad)
            lines.append(f"output {i} {e.shape}: {int(bad.sum())} of {e.size} elements differ, first at "
                         f"{tuple(int(x) for x in idx[0])}: got {g[tuple(idx[0])]!r}, expected {e[tuple(idx[0])]!r}")
    if len(got) != len(expected):
        lines.append(f"{len(got)} outputs, expected {len(expected)}")
    return "\n".join(lines)
