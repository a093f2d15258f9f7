"""The one rule of partial values per dtype (distir.ir.combine): which partials exist, what a
reduction over a cut dim leaves, and that a split combines back to exactly the value, for every
kind, every dtype and 1-8 workers, with values at the ends of each dtype's range."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from distir.ir import Placement, PlacementError
from distir.ir.combine import PARTIAL_KINDS, check_partial, combine, identity, leaves, partial_refusal, split
from distir.ir.types import np_dtype

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
DTYPES = (*INTS, "bool", *FLOATS)


def finfo(dtype: str):
    return ml_dtypes.finfo(np_dtype(dtype))


def extremes(dtype: str, rng, n: int = 64) -> np.ndarray:
    """Values that reach the dtype's range: its ends, 0, +-1 and random ones."""
    if dtype == "bool":
        return rng.random(n) < 0.5
    t = np_dtype(dtype)
    if dtype in FLOATS:
        info = finfo(dtype)
        ends = [float(info.max), -float(info.max), float(info.tiny), 0.0, 1.0, -1.0]
        x = (rng.standard_normal(n) * 1e3).astype(t)
    else:
        info = np.iinfo(t)
        ends = [int(info.min), int(info.max), 0, 1, int(info.max) - 1] + ([-1] if info.min < 0 else [])
        x = rng.integers(info.min, info.max, n, endpoint=True, dtype=t)
    x[: len(ends)] = np.array(ends).astype(t)
    return x


def test_which_partials_each_dtype_holds():
    held = {d: tuple(k for k in PARTIAL_KINDS if partial_refusal(k, d) is None) for d in DTYPES}
    assert all(held[d] == ("sum", "max", "min", "avg") for d in FLOATS)
    assert all(held[d] == ("sum", "max", "min") for d in INTS)
    assert held["bool"] == ("max", "min")


def test_what_a_reduction_over_a_cut_dim_leaves():
    assert [leaves(r, "float32") for r in ("sum", "mean", "max", "min", "prod")] == ["sum", "sum", "max", "min", None]
    assert [leaves(r, "int8") for r in ("sum", "mean", "max", "min", "prod")] == ["sum", None, "max", "min", None]
    assert [leaves(r, "bool") for r in ("sum", "mean", "max", "min", "prod")] == ["max", "max", "max", "min", None]


def test_refusals_are_one_line_naming_the_place():
    with pytest.raises(PlacementError) as err:
        check_partial(Placement.parse("S[0], P[avg]"), "int32", "parameter 'x'")
    assert str(err.value).startswith("parameter 'x' is \"S[0], P[avg]\": int32 values cannot be P[avg]")
    assert "\n" not in str(err.value)
    with pytest.raises(PlacementError, match="bool values cannot be P\\[sum\\]"):
        check_partial(Placement.parse("P"), "bool", "x")
    check_partial(Placement.parse("P[max], R"), "bool", "x")  # any: fine


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_combines_back_exactly_at_every_count(dtype):
    rng = np.random.default_rng(0)
    value = extremes(dtype, rng)
    for kind in PARTIAL_KINDS:
        if partial_refusal(kind, dtype) is not None:
            with pytest.raises(PlacementError, match=re.escape(f"{dtype} values cannot be P[{kind}]")):
                split(value, kind, 2, rng)
            continue
        for n in range(1, 9):
            parts = split(value, kind, n, rng)
            assert len(parts) == n and all(p.dtype == value.dtype and p.shape == value.shape for p in parts)
            got = combine(kind, parts)
            assert got.dtype == value.dtype
            if dtype == "float64" and kind == "avg":
                # a mean is a sum divided once: n times a float64 rounds (and overflows near the largest)
                fits = np.abs(value) <= float(finfo(dtype).max) / 8
                np.testing.assert_allclose(got[fits], value[fits], rtol=4 * float(finfo(dtype).eps), atol=0)
            else:
                np.testing.assert_array_equal(got, value, err_msg=f"{dtype} P[{kind}] over {n}")


@pytest.mark.parametrize("dtype", INTS)
def test_integer_sum_parts_spread_over_the_range(dtype):
    """The parts of an integer P[sum] wrap around (so a combination that widens, or stops at the
    dtype's end, shows); those of a max lie anywhere below the value."""
    rng = np.random.default_rng(1)
    info = np.iinfo(np_dtype(dtype))
    value = np.zeros(256, np_dtype(dtype))
    parts = split(value, "sum", 3, rng)
    wide = np.sum([p.astype(object) for p in parts], axis=0)
    assert np.any(wide != 0), "some sums must wrap around"
    assert max(int(p.max()) for p in parts) > info.max // 2
    low = split(np.full(256, info.max, np_dtype(dtype)), "max", 4, rng)
    assert min(int(p.min()) for p in low) < info.min // 2 + 1


def test_partial_inputs_are_spread_over_all_workers():
    """A wrong reduction must show: every worker's part of a P[sum] input is non-zero."""
    parts = split(np.ones((4, 4), "float32"), "sum", 4, np.random.default_rng(0))
    assert all(np.abs(p).sum() > 0 for p in parts)
    np.testing.assert_allclose(sum(parts), np.ones((4, 4)), rtol=1e-5)


def test_combine_in_the_dtype_wraps_and_bools_are_any_and_all():
    a = np.array([100, -100, 127], "int8")
    assert combine("sum", [a, a]).tolist() == [-56, 56, -2]
    u = np.array([255, 0], "uint8")
    assert combine("sum", [u, np.array([1, 1], "uint8")]).tolist() == [0, 1]
    b = [np.array([True, False, False]), np.array([True, True, False])]
    assert combine("max", b).tolist() == [True, True, False]
    assert combine("min", b).tolist() == [True, False, False]
    assert combine("avg", [np.array([1.0], "float16"), np.array([2.0], "float16")]).tolist() == [1.5]


def test_identities():
    assert identity("max", "uint8") == 0 and identity("min", "uint8") == 255
    assert identity("max", "bool") is False and identity("min", "bool") is True
    assert identity("max", "float16") == float("-inf") and identity("sum", "bool") is False
    assert identity("min", "int64") == 2**63 - 1 and identity("prod", "int8") == 1
