"""Half precision on Disco: no false alarm, and a wrong number still caught (issue 38, item 1).

TVM's float16/bfloat16 kernels round otherwise than distir's interpreter (a 2-layer Llama block
in bfloat16: about 10% of the largest value apart on one device), so a TVM run is compared with
TVM's own one-device build of the module as well as with the interpreter, each within what
rounding allows the program's reductions (distir.analysis.rounding). The oracle of "right" is a
float32 run of the same (rounded) inputs: both backends stay within the bound of it too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import distir
from distir import driver as driver_mod
from distir import examples
from distir.analysis.rounding import reduction_length, rounding_bound, unit_roundoff
from distir.cli import main as distir_main
from distir.driver import INTERPRETER, TVM_ONE_DEVICE, Driver, flat_outputs, random_inputs


def _model(name: str, dtype: str):
    if name == "llama_nn":  # the relax.frontend.nn Llama, laid out by its plan
        from distir.transform import ShardParams
        from distir.tvm import from_nn
        from distir.examples.nn import llama as L

        text = from_nn(L.Llama(), L.spec()).script()
        return ShardParams(L.TP_PLAN_STRATEGIES)(distir.parse(text.replace("float32", dtype)))
    text = examples.llama_stack(2).script() if name == "stack2" else examples.text(name)
    return distir.parse(text.replace("float32", dtype))


@pytest.fixture(scope="module")
def drivers():
    made: dict = {}

    def get(name: str, dtype: str):
        if (name, dtype) not in made:
            mod = _model(name, dtype)
            func = "forward" if "forward" in mod.functions else "main"
            made[name, dtype] = (Driver(mod, func=func), random_inputs(mod, func=func, seed=3))
        return made[name, dtype]

    return get


def test_unit_roundoff_and_bound_by_hand():
    assert unit_roundoff("bfloat16") == 2.0**-8
    assert unit_roundoff("float16") == 2.0**-11
    assert unit_roundoff("float32") == 2.0**-24
    assert unit_roundoff("int8") == 0.0 and unit_roundoff("bool") == 0.0
    assert rounding_bound("bfloat16", 256) == pytest.approx(1.5 * 2.0**-8 * 16)


def test_reduction_length_counts_each_reduction():
    # x (s, 64) @ w1 (64, 32) adds 64 terms per element; sum over axis 1 of (s, 32) adds 32
    mod = distir.parse('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("s", 64), "float16"), w1: R.Tensor((64, 32), "float16")) -> R.Tensor(("s",), "float16"):
        s = T.int64()
        with R.dataflow():
            h: R.Tensor((s, 32), "float16") = R.matmul(x, w1, out_dtype=None)
            e: R.Tensor((s, 32), "float16") = R.exp(h)
            y: R.Tensor((s,), "float16") = R.sum(e, axis=[1])
            R.output(y)
        return y
''')
    assert int(reduction_length(mod)) == 64 + 32
    # the bundled Llama layer: q, k, v, o, gate, up over 128 and down over 256; scores over the
    # head (16) and the context over the sequence (s)
    length = reduction_length(examples.load("llama"))
    assert distir.ir.sym.evaluate(length, {"s": 16}) == 6 * 128 + 256 + 16 + 16


@pytest.mark.parametrize("name, dtype, counts", [
    ("stack2", "bfloat16", (1, 3, 8)),
    ("stack2", "float16", (1, 5)),
    ("llama", "float16", (2, 8)),
    ("mlp", "bfloat16", (1, 4)),
    ("attention", "bfloat16", (2, 7)),
    ("llama_nn", "bfloat16", (3,)),
])
def test_no_false_alarm_in_half_precision(drivers, name, dtype, counts):
    d, inputs = drivers(name, dtype)
    # the oracle: float32 on the same half-precision inputs, held to the same bound
    mod32 = _model(name, "float32")
    wide = [np.asarray(a, dtype=np.float32) if np.asarray(a).dtype.kind in "fV" else a for a in inputs]
    truth = flat_outputs(distir.runtime.run(mod32, *wide, func=d.func))[0]
    bound = rounding_bound(dtype, d.rounding_length(inputs)) * float(np.abs(truth).max())
    for n in counts:
        for backend in ("sim", "tvm"):
            r = d.run(inputs, n, backend=backend)
            assert r.ok, (backend, n, r.comparison.mismatch)
            got = flat_outputs(r.outputs)[0].astype(np.float64)
            assert float(np.abs(got - truth).max()) <= 2 * bound, (backend, n)
            if backend == "tvm":  # half precision: both references compared with
                assert set(r.comparison.references) == {INTERPRETER, TVM_ONE_DEVICE}


def test_tvm_one_device_build_is_not_the_interpreter(drivers):
    # the reason for the second reference: TVM's own bf16 build is far from the interpreter (the
    # interpreter rounds once per op, TVM's kernels accumulate in bfloat16), yet within the bound
    d, inputs = drivers("stack2", "bfloat16")
    own = flat_outputs(d.tvm_reference(inputs))[0].astype(np.float64)
    ref = flat_outputs(d.reference(inputs))[0].astype(np.float64)
    scale = float(np.abs(ref).max())
    assert float(np.abs(own - ref).max()) > 2e-2 * scale + 1e-2 * scale  # the old tolerance's false alarm
    assert float(np.abs(own - ref).max()) <= rounding_bound("bfloat16", d.rounding_length(inputs)) * scale


def test_a_corrupted_weight_piece_is_a_mismatch(drivers, monkeypatch):
    d, inputs = drivers("stack2", "bfloat16")
    real = driver_mod._disco_pieces
    down = [p.name for p in d.mod["main"].params].index("l1_w_down")

    def corrupted(f, gparams, arrays, values, total, seed):
        pieces = real(f, gparams, arrays, values, total, seed)
        pieces[down][1] = -pieces[down][1]  # worker 1 got its rows of the last down projection negated
        return pieces

    monkeypatch.setattr(driver_mod, "_disco_pieces", corrupted)
    r = d.run(inputs, 2, backend="tvm")
    assert not r.ok
    assert r.comparison.mismatch.startswith(f"output 0 differs from {INTERPRETER}")
    assert set(r.comparison.references) == {INTERPRETER, TVM_ONE_DEVICE}


def test_a_wrong_element_is_a_mismatch_naming_the_reference(drivers, monkeypatch):
    d, inputs = drivers("stack2", "bfloat16")
    ref = flat_outputs(d.reference(inputs))[0]
    scale = float(np.abs(ref.astype(np.float64)).max())
    bound = rounding_bound("bfloat16", d.rounding_length(inputs)) * scale
    real = Driver._run_disco

    def one_wrong(self, *args):
        out = np.array(real(self, *args))
        out[3, 5] = out[3, 5].astype(np.float64) + 2 * bound  # one element off by twice the bound
        return out

    monkeypatch.setattr(Driver, "_run_disco", one_wrong)
    r = d.run(inputs, 3, backend="tvm")
    assert not r.ok and r.max_diff > bound
    assert r.comparison.mismatch.startswith(f"output 0 differs from {INTERPRETER} (max abs difference")


def test_the_mismatch_names_tvms_own_build_when_only_it_differs(drivers, monkeypatch):
    d, inputs = drivers("mlp", "bfloat16")
    own = flat_outputs(d.tvm_reference(inputs))[0]
    shifted = (own.astype(np.float64) + float(np.abs(own.astype(np.float64)).max())).astype(own.dtype)
    monkeypatch.setattr(Driver, "tvm_reference", lambda self, inputs, target=None: shifted)
    r = d.run(inputs, 2, backend="tvm")
    assert not r.ok
    assert r.comparison.mismatch.startswith(f"output 0 differs from {TVM_ONE_DEVICE}")
    assert r.comparison.references[INTERPRETER] < r.comparison.references[TVM_ONE_DEVICE]
    assert "from TVM's own one-device build" in r.comparison.differences()


def test_float32_is_compared_with_the_interpreter_only(drivers):
    d, inputs = drivers("mlp", "float32")
    r = d.run(inputs, 2, backend="tvm")
    assert r.ok and set(r.comparison.references) == {INTERPRETER}
    assert math.isfinite(r.max_diff) and r.max_diff < 1e-3


def test_a_difference_tvms_own_build_shares_is_still_a_mismatch_and_said_so(drivers, monkeypatch):
    # TVM 0.27's bfloat16 topk gives wrong indices (the MoE router in bfloat16: Disco and TVM's own
    # build agree, both far from the interpreter): the verdict stays a mismatch, and the line says
    # the distribution is not the cause. Here the interpreter's numbers are moved instead.
    d, inputs = drivers("mlp", "bfloat16")
    ref = flat_outputs(d.reference(inputs))[0]
    moved = (ref.astype(np.float64) + float(np.abs(ref.astype(np.float64)).max())).astype(ref.dtype)
    monkeypatch.setattr(Driver, "reference", lambda self, inputs, weights=None: moved)
    r = d.run(inputs, 2, backend="tvm")
    assert not r.ok
    assert r.comparison.mismatch.startswith(f"output 0 differs from {INTERPRETER}")
    assert r.comparison.mismatch.endswith(f"; {TVM_ONE_DEVICE} gives these numbers too: the difference is in TVM's "
                                          "kernels for this dtype, not in the distribution")


def test_run_of_a_bfloat16_block_on_one_worker_matches_and_names_both_references(tmp_path, capsys):
    # issue 38: `distir run block_bf16.py -n 1 --backend tvm` said DOES NOT match (largest difference 16.2).
    # (Kept here, after test_tvm_deploy: a 1-worker Disco run earlier in the process makes its
    # killed-worker test abort the process now and then, on main too.)
    path = tmp_path / "block_bf16.py"
    path.write_text(examples.llama_stack(2).script().replace("float32", "bfloat16"))
    assert distir_main.main(["run", str(path), "-n", "1", "--backend", "tvm"]) == 0
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    assert line.startswith("tvm result on 1 workers matches the single-device result")
    assert "from the single-device result (distir's interpreter)" in line and "from TVM's own one-device build" in line
    assert "1 worker: no collectives" in out
