"""Every op family, sharded and partial, exported to TVM and run on Disco: the programs of
test_runtime_sharded_ops, checked against the interpreter on TVM instead of the simulator,
plus the elementwise and creation ops those programs do not use."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import test_runtime_sharded_ops as sharded
from distir.driver import Driver, compare, run_disco
from distir.runtime import run
from distir.transform.pipelines import distribute_pipeline
from distir.tvm import specialize_and_build, to_relax

COUNTS = (1, 2, 4)


def tvm_equivalent(mod, inputs, num_workers=COUNTS, *, func="main", symbol="num_workers", pipeline=None, rtol=1e-5,
                   atol=None, seed=0):
    """assert_sharded_equivalent, with its arguments (none dropped), on TVM: the pipeline once, one
    symbolic export, bound, built and run on Disco per count (the driver's TVM backend), compared
    with the interpreter by the driver's comparison (the number of outputs too)."""
    d = Driver(mod, func=func, symbol=symbol, pipeline=pipeline)
    for w in num_workers:
        r = d.run(inputs, {symbol: w}, backend="tvm", seed=seed + w, rtol=rtol, atol=rtol if atol is None else atol,
                  absolute_atol=atol is not None)
        assert r.ok, f"{symbol}={w}: {r.comparison.mismatch}"


def test_the_comparison_counts_outputs():
    """A result with an output more or less than one device's is a mismatch, whatever the outputs hold."""
    x = np.ones(3, "float32")
    assert compare((x, x), (x, x)).ok
    assert compare((x, x), (x,)).mismatch == "2 outputs, expected 1"
    assert compare((x,), ((x, x),)).mismatch == "1 outputs, expected 2"


SHARDED_PROGRAMS = [
    (name, params)
    for name, fn in inspect.getmembers(sharded, inspect.isfunction)
    if name.startswith("test_")
    for params in (
        next(m.args[1] for m in getattr(fn, "pytestmark", []) if m.name == "parametrize")
        if getattr(fn, "pytestmark", None)
        else [()]
    )
]


@pytest.mark.parametrize("name, params", SHARDED_PROGRAMS, ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_sharded_op_programs_on_disco(name, params, monkeypatch):
    monkeypatch.setattr(sharded, "assert_sharded_equivalent", tvm_equivalent)
    getattr(sharded, name)(*params)


ELEMENTWISE_LINES = [
    'a = R.abs(x)',
    'pos = R.add(a, R.const(0.5, "float32"))',
    *[f"{op} = R.{op}(pos)" for op in ("cos", "sin", "sqrt", "rsqrt", "square", "tanh", "log", "erf", "sigmoid")],
    "e = R.exp(x)",
    "g = R.nn.gelu_tanh(x)",
    "neg = R.negative(y)",
    "rl = R.nn.relu(neg)",
    "sub = R.subtract(x, y)",
    "div = R.divide(x, pos)",
    'pw = R.power(pos, R.const(1.5, "float32"))',
    "mx = R.maximum(x, y)",
    "mn = R.minimum(x, y)",
    *[f"{op} = R.{op}(x, y)" for op in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")],
    *[f'f_{op} = R.astype({op}, "float32")' for op in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")],
    'ones = R.ones(R.shape([8, 16]), "float32")',
    'zeros = R.zeros(R.shape([8, 16]), "float32")',
    'full = R.full(R.shape([8, 16]), R.const(2.0, "float32"), "float32")',
]
ELEMENTWISE_TERMS = [
    "cos", "sin", "sqrt", "rsqrt", "square", "tanh", "log", "erf", "sigmoid", "e", "g", "rl", "sub", "div", "pw",
    "mx", "mn", "f_equal", "f_not_equal", "f_greater", "f_greater_equal", "f_less", "f_less_equal", "ones", "zeros",
    "full",
]  # fmt: skip


def elementwise_module() -> str:
    lines = list(ELEMENTWISE_LINES)
    acc = ELEMENTWISE_TERMS[0]
    for i, term in enumerate(ELEMENTWISE_TERMS[1:]):
        lines.append(f"s{i} = R.add({acc}, {term})")
        acc = f"s{i}"
    lines += [f"upper = R.triu({acc}, k=2)", "sg = R.sigmoid(upper)", "prod = R.prod(sg, axis=[0])",
              "out = (upper, prod)", "R.output(out)"]
    body = "\n".join("            " + ln for ln in lines)
    return f"""
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]}})

    @R.function
    def main(x: R.DTensor((8, 16), "float32", "mesh[0]", "S[0]"), y: R.DTensor((8, 16), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
{body}
        return out
"""


def test_elementwise_and_creation_ops_on_disco():
    import distir

    mod = distir.parse(elementwise_module())
    rng = np.random.default_rng(4)
    tvm_equivalent(mod, [rng.standard_normal((8, 16)).astype("float32") for _ in range(2)], atol=1e-4)


# ---------------------------------------------------------------- an op declared only here


def _leaky_relu_op():
    """A toy elementwise op whose only TVM knowledge is its RelaxForm: relax.op.nn.leakyrelu,
    with the slope passed as Relax's ``alpha`` and converted from a percentage."""
    from distir.ir import OpDef, Param
    from distir.ir.op import RelaxAttr, RelaxForm, ShardingDoc
    from distir.ops._common import broadcast_rule, expect_tensor

    return OpDef(
        name="toy.leaky_relu",
        params=(Param("data", "tensor"), Param("slope_percent", "int", 1)),
        infer=lambda types, attrs: expect_tensor(types[0], "toy.leaky_relu"),
        numpy=lambda xs, attrs, ctx: np.where(xs[0] > 0, xs[0], xs[0] * (attrs["slope_percent"] / 100)).astype(
            xs[0].dtype
        ),
        sharding=lambda types, attrs, outs: broadcast_rule([types[0].shape], outs[0].ndim),
        doc="Leaky ReLU with the negative slope in percent.",
        relax=RelaxForm("relax.op.nn.leakyrelu", (RelaxAttr("slope_percent", "alpha", lambda p: p / 100),)),
        category="elementwise",
        sharding_doc=ShardingDoc(passes="all"),
    )


TOY_MODULE = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((8, 16), "float32", "mesh[0]", "S[0]"), w: R.DTensor((16, 4), "float32", "mesh[0]", "R")):
        with R.dataflow():
            h = R.toy.leaky_relu(x, slope_percent=20)
            y = R.matmul(h, w)
            z = R.dist.redistribute(y, device_mesh="mesh[0]", placement="R")
            R.output(z)
        return z
"""


def test_an_op_declared_outside_distir_exports_builds_and_runs_on_disco():
    """No edit in distir.tvm: the declaration's RelaxForm is the whole TVM form."""
    import tvm

    import distir
    from distir.testing import temporary_op
    from distir.tvm.relax.ops import supported_ops

    with temporary_op(_leaky_relu_op()):
        assert "toy.leaky_relu" in supported_ops()
        mod = distir.parse(TOY_MODULE)
        exported = to_relax(distribute_pipeline()(mod))
        calls = [
            b.value
            for block in exported["main"].body.blocks
            for b in block.bindings
            if isinstance(b.value, tvm.ir.expr.Call) and str(b.value.op.name) == "relax.nn.leakyrelu"
        ]
        assert len(calls) == 1 and float(calls[0].attrs.alpha) == pytest.approx(0.2)
        rng = np.random.default_rng(5)
        x, w = rng.standard_normal((8, 16)).astype("float32"), rng.standard_normal((16, 4)).astype("float32")
        expected = run(mod, x, w)
        assert np.any(x < 0) and not np.allclose(expected, run(mod, np.maximum(x, 0), w))  # the slope shows
        tvm_equivalent(mod, [x, w])
    assert "toy.leaky_relu" not in supported_ops()
