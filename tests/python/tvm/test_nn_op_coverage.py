"""Every function of tvm.relax.frontend.nn.op, as a TVM user calls it (nn_op_cases.py): imported by
from_nn, sharded by a plan and run exactly at 1-8 workers on the simulator; all cases in one module
compared with TVM's own one-device build and run on Disco; the functions distir does not import
refused with a message that names them and says what to write instead; and the table of
docs/frontend.md is what the cases give."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import distir
import nn_op_cases as C
from distir.driver import Driver, compare, flat_outputs
from distir.transform import ShardParams
from distir.tvm import TvmImportError, from_nn
from tvm_build import one_device_vm

DOC = Path(__file__).resolve().parents[3] / "docs" / "frontend.md"


def test_every_nn_op_function_has_a_case():
    covered = {fn for case in C.CASES for fn in C.case_trace(case)}
    refused = {u.function for u in C.UNSUPPORTED}
    assert not covered & refused
    missing = sorted(set(C.nn_op_functions()) - covered - refused)
    assert not missing, f"nn.op functions without a case in nn_op_cases.py: {missing}"


@pytest.mark.parametrize("case", C.CASES, ids=lambda c: c.name)
def test_case_runs_exactly_on_the_simulator(case):
    mod = from_nn(case.module(), case.export_spec())
    assert distir.parse(mod.script()).script() == mod.script()  # every new op prints and parses back
    driver = Driver(ShardParams(case.plan)(mod), func="forward")
    inputs, weights = case.inputs(np.random.default_rng(0)), C.weights(case)
    expected = flat_outputs(driver.reference(inputs, weights))
    for n in case.counts:
        r = driver.run(inputs, n, weights=weights)
        assert r.ok, (n, r.comparison.mismatch)
        for i, (got, want) in enumerate(zip(flat_outputs(r.outputs), expected)):
            if not np.issubdtype(want.dtype, np.floating):  # integers and booleans: exact
                np.testing.assert_array_equal(got, want, err_msg=f"output {i} at {n} workers")


@pytest.mark.parametrize("unsupported", C.UNSUPPORTED, ids=lambda u: u.function)
def test_what_distir_does_not_import_says_what_to_write_instead(unsupported):
    with pytest.raises(TvmImportError) as err:
        from_nn(unsupported.module(), {"forward": unsupported.spec})
    text = str(err.value)
    assert re.search(unsupported.error, text), text
    assert "\n" not in text


def test_an_unknown_relax_op_says_what_to_do():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.dropout(x)[0])
        bb.emit_func_output(y)
    with pytest.raises(TvmImportError, match=r"@main, binding '.*': TVM op relax\.nn\.dropout has no distir counterpart: "
                       r"write it with the nn\.op functions distir imports \(the table of docs/frontend\.md\), or "
                       r"declare an OpDef for it in distir/ops \(docs/ops\.md\)$"):
        distir.tvm.from_relax(bb.get())


def test_the_table_of_docs_frontend_is_what_the_cases_give():
    """scripts/gen_nn_op_table.py regenerates it; the "tested" column lists the counts the tests above run."""
    text = DOC.read_text()
    assert C.update_table(text) == text, "docs/frontend.md's nn.op table is out of date: run scripts/gen_nn_op_table.py"


# ---------------------------------------------------------------- all cases together: TVM on one device, Disco


@pytest.fixture(scope="session")
def suite():
    module, spec, plan = C.suite_module()
    inputs, weights = C.suite_inputs()
    exported, params = module.export_tvm(spec)
    vm = one_device_vm(exported)
    out = vm["forward"](*[tvm.runtime.tensor(a) for a in [*inputs, *(weights[n] for n, _ in params)]])
    driver = Driver(ShardParams(plan)(from_nn(module, spec)), func="forward")
    return inputs, weights, _numpy(out), driver


def _numpy(out):
    if hasattr(out, "numpy"):
        return (out.numpy(),)
    return tuple(a for f in out for a in _numpy(f))


def test_every_case_computes_what_tvm_computes_on_one_device(suite):
    inputs, weights, expected, driver = suite
    got = flat_outputs(driver.reference(inputs, weights))
    assert len(got) == len(expected)
    c = compare(got, expected, atol=1e-5)
    assert c.ok, c.mismatch


@pytest.mark.parametrize("workers", C.DISCO_COUNTS)
def test_every_case_runs_on_disco(suite, workers):
    inputs, weights, expected, driver = suite
    r = driver.run(inputs, workers, weights=weights, backend="tvm")
    assert r.ok, r.comparison.mismatch
    assert compare(r.outputs, expected).ok


def test_relax_ops_outside_nn_op_import_and_match_tvm():
    """tile, clip (clamp) and tril are Relax ops with no nn.op function: imported from Relax, cut, exact."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([5, 4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            tiled = bb.emit(relax.op.tile(x, [1, 3]))
            clamped = bb.emit(relax.op.clip(tiled, -0.5, 0.5))
            y = bb.emit_output(relax.op.tril(clamped, 1))
        bb.emit_func_output(y)
    tvm_mod = bb.get()
    data = np.random.default_rng(2).standard_normal((5, 4)).astype("float32")
    vm = one_device_vm(tvm_mod)
    expected = vm["main"](tvm.runtime.tensor(data)).numpy()
    driver = Driver(ShardParams({"x": "S[0]"})(distir.tvm.from_relax(tvm_mod)))
    assert compare(driver.reference([data]), expected).ok
    for n in C.SIM_COUNTS:
        r = driver.run([data], n)
        assert r.ok, (n, r.comparison.mismatch)
