"""Exact on every dtype on Disco too: the cases of issue 22 (an integer mean over a cut dim,
unsigned and bool partial inputs, integer sums that wrap around, bool any / all through Disco's
all-reduce and through the gathered groups of a strided mesh axis) give the single-device
numbers, as on the simulator (tests/python/system/test_dtype_exact.py)."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.driver import Driver, flat_outputs

TEXT = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")),
                                    R.device_mesh(("num_workers", 2), I.Range(0, "2 * num_workers"))]})

    @R.function
    def main(a: R.DTensor((4, 3), "int32", "mesh[0]", "S[0]"),
             b: R.DTensor((3, 4), "int8", "mesh[0]", "S[1]"),
             c: R.DTensor((4,), "uint8", "mesh[0]", "P[min]"),
             d: R.DTensor((4,), "uint8", "mesh[0]", "P[max]"),
             e: R.DTensor((4,), "bool", "mesh[0]", "P[max]"),
             f: R.DTensor((4,), "bool", "mesh[0]", "P[min]"),
             g: R.DTensor((4,), "int8", "mesh[0]", "P"),
             h: R.DTensor((4,), "int32", "mesh[0]", "P"),
             i: R.DTensor((4, 3), "bool", "mesh[1]", "P[max], R"),
             j: R.DTensor((5, 3), "bool", "mesh[0]", "S[0]"),
             k: R.DTensor((3, 2), "int64", "mesh[0]", "S[0]")):
        with R.dataflow():
            ya = R.mean(a, axis=[0])
            yb = R.mean(b, axis=[1])
            yc = R.dist.redistribute(c, device_mesh="mesh[0]", placement="R")
            yd = R.dist.redistribute(d, device_mesh="mesh[0]", placement="R")
            ye = R.dist.redistribute(e, device_mesh="mesh[0]", placement="R")
            yf = R.dist.redistribute(f, device_mesh="mesh[0]", placement="S[0]")
            yg = R.dist.redistribute(g, device_mesh="mesh[0]", placement="R")
            yh = R.dist.redistribute(h, device_mesh="mesh[0]", placement="R")
            yi = R.dist.redistribute(i, device_mesh="mesh[1]", placement="R, R")
            yj0 = R.max(j, axis=[0])
            yj1 = R.min(j, axis=[0])
            yj2 = R.mean(j, axis=[0])
            yj3 = R.sum(j, axis=[0])
            yk = R.mean(k, axis=[0])
            R.output(ya, yb, yc, yd, ye, yf, yg, yh, yi, yj0, yj1, yj2, yj3, yk)
        return (ya, yb, yc, yd, ye, yf, yg, yh, yi, yj0, yj1, yj2, yj3, yk)
'''


def inputs():
    rng = np.random.default_rng(3)
    return [
        np.array([[1, 1, 5], [0, 1, 5], [0, 1, 5], [0, 0, 6]], "int32"),  # one device: [0, 0, 5]
        np.array([[100, 100, 100, 100], [-128, -128, -128, 127], [-1, 0, 0, 0]], "int8"),  # sums leave int8
        np.array([0, 255, 3, 128], "uint8"),
        np.array([0, 255, 3, 128], "uint8"),
        np.array([True, False, True, False]),
        np.array([True, False, True, False]),
        np.array([68, -128, 127, -1], "int8"),
        np.array([1500000000, -2000000000, 7, 1073741824], "int32"),
        rng.random((4, 3)) < 0.5,
        np.array([[0, 0, 1], [0, 0, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]], bool),
        np.array([[2**62 + 1, -(2**63)], [2**62 + 1, -(2**63) + 3], [2**62 + 1, 2**63 - 1]], "int64"),
    ]


@pytest.fixture(scope="module")
def driver():
    return Driver(distir.parse(TEXT))


def test_the_reference_is_exact(driver):
    want = flat_outputs(driver.reference(inputs()))
    assert want[0].tolist() == [0, 0, 5]
    assert want[1].tolist() == [100, -64, 0]  # 400 / 4; -257 / 4 and -1 / 4 rounded toward zero
    assert want[13].tolist() == [2**62 + 1, -((2**63 - 2) // 3)]
    assert [w.tolist() for w in want[9:13]] == [[False, True, True], [False, False, False], [False, True, True],
                                                [False, True, True]]


@pytest.mark.parametrize("workers", [2, 3])
def test_disco_gives_the_single_device_numbers(driver, workers):
    x = inputs()
    want = flat_outputs(driver.reference(x))
    got = flat_outputs(driver.run(x, workers, backend="tvm", seed=workers).outputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"output {k} at {workers} workers")


BOOL_BINARY = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]}})

    @R.function
    def main(x: R.DTensor((4, 3), "bool", "mesh[0]", "S[0]"), y: R.DTensor((4, 3), "bool", "mesh[0]", "R")):
        num_workers = T.int64()
        with R.dataflow():
            z = R.{op}(x, y)
            R.output(z)
        return z
'''

# what each op of bools is, written as logic (the oracle: not numpy, which distir's reference calls)
BOOL_TRUTH = {
    "add": lambda a, b: a | b,
    "multiply": lambda a, b: a & b,
    "maximum": lambda a, b: a | b,
    "minimum": lambda a, b: a & b,
    "equal": lambda a, b: ~(a ^ b),
    "not_equal": lambda a, b: a ^ b,
    "less": lambda a, b: ~a & b,  # False < True
    "less_equal": lambda a, b: ~a | b,
    "greater": lambda a, b: a & ~b,
    "greater_equal": lambda a, b: a | ~b,
}


@pytest.mark.parametrize("op", sorted(BOOL_TRUTH))
def test_bool_logic_and_comparisons_agree_on_both_backends(op):
    """TVM builds no arithmetic or comparison of bools (LLVM's float compare of i1, "power only
    applies to float"): add / multiply are emitted as or / and, comparisons through uint8."""
    a = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 0], [0, 1, 1]], bool)
    b = np.array([[0, 1, 0], [1, 1, 0], [0, 1, 1], [1, 0, 0]], bool)
    want = BOOL_TRUTH[op](a, b)
    driver = Driver(distir.parse(BOOL_BINARY.format(op=op)))
    for workers in (1, 2, 3):
        for backend in ("sim", "tvm"):
            got = np.asarray(driver.run([a, b], workers, backend=backend).outputs)
            assert got.dtype == np.bool_, (backend, workers)
            np.testing.assert_array_equal(got, want, err_msg=f"{backend} at {workers} workers")


@pytest.mark.parametrize("op", ["subtract", "divide", "power"])
def test_bool_arithmetic_without_a_bool_result_is_one_line_before_either_backend(op):
    from distir.errors import ParseError

    with pytest.raises(ParseError, match=rf"R.{op}: does not apply to bool tensors .*use R.astype first") as err:
        distir.parse(BOOL_BINARY.format(op=op))
    assert "Traceback" not in str(err.value)
