"""Exact on every dtype: every reduction of every placement, on int8/int16/int32/int64/uint8/bool/
float16/bfloat16/float32/float64, at 1 to 8 workers, with values that reach each dtype's range,
gives the single-device numbers on the simulator; what cannot be exact is refused at compile time
with one line (the rule: distir.ir.combine). The cases of issue 22 are checked by their numbers."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import distir
from distir.driver import Driver
from distir.errors import DistirError
from distir.ir.combine import partial_refusal
from distir.ir.types import np_dtype
from distir.runtime.spmd import run_spmd

FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = ("int8", "int16", "int32", "int64", "uint8", "bool", *FLOATS)
PLACEMENTS = ("R", "S[0]", "S[1]", "P", "P[max]", "P[min]", "P[avg]")
REDUCTIONS = ("sum", "mean", "max", "min", "prod")
SHAPE = (5, 3)  # 5 and 3 do not divide most counts, and 3 is below 4..8
MESH = 'R.device_mesh(("num_workers",), I.Range(0, "num_workers"))'


def module_text(params: list[str], lines: list[str], outs: list[str]) -> str:
    body = "\n".join(f"            {ln}" for ln in lines)
    result = f"({', '.join(outs)},)" if len(outs) > 1 else outs[0]
    return f'''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [{MESH}]}})

    @R.function
    def main({", ".join(params)}):
        with R.dataflow():
{body}
            R.output({", ".join(outs)})
        return {result}
'''


def _kind(placement: str) -> str:
    return placement[2:-1] if "[" in placement else "sum"


def held(dtype: str) -> list[str]:
    """The placements a value of ``dtype`` may have (the partials the rule lets it hold)."""
    return [p for p in PLACEMENTS if not p.startswith("P") or partial_refusal(_kind(p), dtype) is None]


def every_reduction(dtype: str) -> str:
    params, lines, outs = [], [], []
    for i, p in enumerate(held(dtype)):
        params.append(f'x{i}: R.DTensor({SHAPE}, "{dtype}", "mesh[0]", "{p}")')
        for r in REDUCTIONS:
            if r == "prod" and p.startswith("P") and dtype in FLOATS:
                continue  # a product of float parts added up is as ill-conditioned as its smallest factor
            # with S[0] and S[1] inputs: over the cut dim, over the whole one, over both
            for j, axis in enumerate(("[0]", "None")):
                lines.append(f"y{i}_{r}{j} = R.{r}(x{i}, axis={axis})")
                outs.append(f"y{i}_{r}{j}")
    return module_text(params, lines, outs)


def extreme_values(dtype: str, rng) -> np.ndarray:
    """A SHAPE array reaching the dtype's range: its ends, 0, +-1 and random values (floats up to
    a 64th of the largest, so that one worker's partial sum of five is finite as one device's is)."""
    t = np_dtype(dtype)
    if dtype == "bool":
        return rng.random(SHAPE) < 0.5
    if dtype in FLOATS:
        top = float(ml_dtypes.finfo(t).max) / 64
        x = rng.uniform(-top, top, SHAPE)
        x.flat[:4] = [top, -top, 0.0, 1.0]
        return x.astype(t)
    info = np.iinfo(t)
    x = rng.integers(info.min, info.max, SHAPE, endpoint=True, dtype=t)
    x.flat[:5] = np.array([info.min, info.max, 0, 1, info.max - 1]).astype(t)
    return x


def assert_same(got, want, dtype: str, what: str):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if dtype not in FLOATS:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    # rounding only: partial values are held in the dtype, one device adds in float64
    eps = float(ml_dtypes.finfo(np_dtype(dtype)).eps)
    scale = float(ml_dtypes.finfo(np_dtype(dtype)).max) / 64
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=64 * eps, atol=64 * eps * scale,
                               err_msg=what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_reduction_of_every_placement_at_every_count(dtype):
    driver = Driver(distir.parse(every_reduction(dtype)))
    rng = np.random.default_rng(DTYPES.index(dtype))
    inputs = [extreme_values(dtype, rng) for _ in driver.mod["main"].params]
    want = driver.reference(inputs)
    for n in range(1, 9):
        got = run_spmd(driver.specialize(n), *inputs, seed=n)
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, dtype, f"{dtype} output {k} at {n} workers")


@pytest.mark.parametrize("dtype, placement", [("int32", "P[avg]"), ("int8", "P[avg]"), ("uint8", "P[avg]"),
                                              ("bool", "P"), ("bool", "P[avg]"), ("int64", "S[0], P[avg]")])
def test_partials_a_dtype_cannot_hold_are_refused_in_one_line(dtype, placement):
    mesh = MESH if "," not in placement else 'R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))'
    text = module_text([f'x: R.DTensor((4,), "{dtype}", "mesh[0]", "{placement}")'], ["y = R.max(x, axis=[0])"], ["y"])
    with pytest.raises(DistirError) as err:
        distir.parse(text.replace(MESH, mesh))
    first = str(err.value).splitlines()[0]
    assert f'this DTensor is "{placement}": {dtype} values cannot be P[' in first


@pytest.mark.parametrize("target", ["P[avg]", "P"])
def test_a_redistribute_into_a_partial_the_dtype_cannot_hold_is_refused(target):
    dtype = "int16" if target == "P[avg]" else "bool"
    text = module_text([f'x: R.DTensor((4,), "{dtype}", "mesh[0]", "R")'],
                       [f'y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{target}")'], ["y"])
    with pytest.raises(DistirError, match=re.escape(f'the target layout is "{target}": {dtype} values cannot be')):
        distir.parse(text)


# ---------------------------------------------------------------- the numbers of issue 22


def run_all_counts(text: str, x: np.ndarray, want, counts=range(1, 9)) -> None:
    driver = Driver(distir.parse(text))
    np.testing.assert_array_equal(driver.reference([x]), want)
    for n in counts:
        np.testing.assert_array_equal(driver.run([x], n, seed=n).outputs, want, err_msg=f"{n} workers")


def test_integer_mean_over_a_cut_dim_rounds_once():
    """Each worker used to divide its block's sum by the count: [0, 0, 4] at 2 and 4 workers."""
    x = np.array([[1, 1, 5], [0, 1, 5], [0, 1, 5], [0, 0, 6]], "int32")
    for dtype in ("int8", "uint8", "int32", "int64"):
        text = module_text([f'x: R.DTensor((4, 3), "{dtype}", "mesh[0]", "S[0]")'], ["y = R.mean(x, axis=[0])"], ["y"])
        run_all_counts(text, x.astype(dtype), np.array([0, 0, 5], dtype))


def test_integer_mean_is_exact_at_the_ends_of_int64():
    big = np.array([[2**62 + 1, -(2**63)], [2**62 + 1, -(2**63) + 3], [2**62 + 1, 2**63 - 1]], "int64")
    text = module_text(['x: R.DTensor((3, 2), "int64", "mesh[0]", "S[0]")'], ["y = R.mean(x, axis=[0])"], ["y"])
    # (2^62 + 1 is 2^62 in float64; the second column's sum, 2 - 2^63, is not an int64)
    run_all_counts(text, big, np.array([2**62 + 1, -((2**63 - 2) // 3)], "int64"))


@pytest.mark.parametrize("dtype, values, placement", [
    ("uint8", [0, 255, 3, 128], "P[min]"),  # the noise used to wrap: off by up to 3
    ("uint8", [0, 255, 3, 128], "P[max]"),  # used to crash: -1 out of bounds for uint8
    ("int8", [68, -128, 127, -1], "P[min]"),
    ("int8", [68, -128, 127, -1], "P"),
    ("bool", [True, False, True, False], "P[max]"),  # used to come back all True
    ("bool", [True, False, True, False], "P[min]"),
    ("int32", [1500000000, -2000000000, 7, 1073741824], "P"),
])
def test_partial_inputs_of_unsigned_and_bool_dtypes(dtype, values, placement):
    for target in ("R", "S[0]"):
        text = module_text([f'x: R.DTensor((4,), "{dtype}", "mesh[0]", "{placement}")'],
                           [f'y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{target}")'], ["y"])
        run_all_counts(text, np.array(values, dtype), np.array(values, dtype))
