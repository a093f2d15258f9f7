"""Round trips of the text format: parse(print(m)) == m and print is a fixed point, over a corpus."""

from __future__ import annotations

import math

import numpy as np
import pytest

import distir
from distir.ir import IRModule, assert_structural_equal, structural_equal, sym, sym_parse
from distir.ir.placement import Partial, Placement, Shard
from distir.ir.types import DTensorType, TensorType, TupleType
from distir.runtime import run
from distir.script import print_module

STATIC_1D = '''
@I.ir_module
class Module:
    I.module_attrs({"device_num": 2})
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]"), w: R.DTensor((64, 32), "float32", "mesh[0]", "R")) -> R.DTensor((128, 32), "float32", "mesh[0]", "R"):
        with R.dataflow():
            h = R.matmul(x, w)
            y = R.dist.redistribute(h, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
'''

SYMBOLIC_1D = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor(("m * num_workers", "n"), "float32", "mesh[0]", "S[0]"), w: R.Tensor(("n", 64), dtype="float32")) -> R.DTensor(("m * num_workers", 64), "float32", "mesh[0]", "R"):
        m = T.int64()
        n = T.int64()
        num_workers = T.int64()
        with R.dataflow():
            ws = R.dist.annotate_sharding(w, device_mesh="mesh[0]", placement="R")
            ws2: R.DTensor((n, 64), "float32", "mesh[0]", "R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            y: R.DTensor((m * num_workers, 64), "float32", "mesh[0]", "S[0]") = R.matmul(x, ws)
            z = R.dist.redistribute(y, device_mesh="mesh[0]", placement="R")
            R.output(z)
        return z
'''

SYMBOLIC_2D = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "tp"), I.Range(0, "2 * tp")), R.device_mesh(("dp", "tp"), I.Range(0, "dp * tp"))]})

    @R.function
    def main(x: R.DTensor((128, "256 // tp * tp"), "float32", "mesh[0]", "S[0], S[1]"), y: R.DTensor((16, 16), "float32", "mesh[1]", "R, S[0]")):
        with R.dataflow():
            a = R.dist.redistribute(x, device_mesh="mesh[0]", placement="P, R")
            b = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R, P[max]")
            c = R.dist.redistribute(y, device_mesh="mesh[1]", placement="S[1], S[0]")
            d = R.dist.redistribute(y, device_mesh="mesh[1]", placement="P[avg], P[avg]")
            e = R.dist.redistribute(y, device_mesh="mesh[1]", placement="P[min], R")
            R.output(a, b, c, d, e)
        return (a, b, c, d, e)
'''

PARTIALS = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(a: R.DTensor((8, "k"), "float32", "mesh[0]", "S[1]"), b: R.DTensor(("k", 4), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            p = R.matmul(a, b)
            q = R.add(p, p)
            r = R.dist.redistribute(q, device_mesh="mesh[0]", placement="R")
            R.output(r, p)
        return (r, p)
'''

TUPLES_CONSTANTS = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), i: R.Tensor((3,), dtype="int32")) -> R.Tuple(R.Tensor((4, 8), dtype="float32"), R.Tuple(R.Tensor((4,), dtype="float32"), R.Tensor((), dtype="bool"))):
        c0 = R.const(1.5, "float32")
        c1 = R.const([[1.0, 2.0], [3.0, -4.25]], "float32")
        c2 = R.const([1, -2, 3], "int32")
        c3 = R.const(True, "bool")
        c4 = R.const([float("inf"), float("-inf"), float("nan"), 0.1], "float32")
        c5 = R.const(0.1, "float64")
        c6 = R.const(7, "int64")
        c7 = R.const([0.5, 1e-07], "float16")
        with R.dataflow():
            a = R.add(x, c0)
            s = R.sum(a, axis=1)
            t = (s, c3)
            u = (a, t)
            v = u[1]
            w = v[0]
            k = R.add(i, c2)
            R.output(u, w, k)
        g = u[0]
        h = R.multiply(g, R.const(2.0, "float32"))
        return (h, (w, c3))
'''

SEVERAL_FUNCTIONS = '''
@I.ir_module
class Module:
    I.module_attrs({"name": "several", "version": 3, "ratio": 0.5, "flags": [True, False], "pair": (1, "a"), "nested": {"k": None}})

    @R.function
    def first(x: R.Tensor(("n", 16), dtype="float32")) -> R.Tensor(("n", 16), dtype="float32"):
        n = T.int64()
        R.func_attr({"global_symbol": "first", "num_input": 1, "scale": float("inf")})
        y = R.nn.relu(x)
        with R.dataflow():
            z = R.nn.softmax(y, axis=-1)
            R.output(z)
        with R.dataflow():
            q = R.nn.gelu(z)
            R.output(q)
        r = R.subtract(q, y)
        return r

    @R.function
    def second(x: R.Tensor((8, 16), dtype="float32")):
        a = R.permute_dims(x, axes=None)
        b = R.permute_dims(x, axes=[1, 0])
        c = R.reshape(b, R.shape([4, 32]))
        d = R.reshape(c, (2, -1))
        e = R.sum(d, axis=None, keepdims=True)
        f = R.mean(d, axis=[0, 1], keepdims=False)
        g = R.max(x, axis=-1)
        h = R.astype(x, dtype="float16")
        i = R.matmul(x, a, out_dtype="float32")
        return (a, e, f, g, h, i)
'''

GLOBAL_SIGNATURE_ATTRS = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor(("128 // num_workers", 64), dtype="float32")) -> R.Tensor(("128 // num_workers", 64), dtype="float32"):
        num_workers = T.int64()
        R.func_attr({"distir.global_params": [R.DTensor((128, 64), "float32", "mesh[0]", "S[0]")], "distir.global_result": R.DTensor((128, 64), "float32", "mesh[0]", "S[0]"), "misc": [R.Tuple(R.Tensor((1,), dtype="int64"), R.Prim("int64")), R.Shape([4, "num_workers"]), R.Shape(ndim=2)]})
        y = R.nn.silu(x)
        return y
'''

TRANSFORMER_OPS = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("s", 64), dtype="float32"), g: R.Tensor((64,), dtype="float32"), b: R.Tensor((64,), dtype="float32"), idx: R.Tensor((4,), dtype="int64")):
        s = T.int64()
        ln = R.nn.layer_norm(x, g, b, axes=[-1], epsilon=1e-05, center=True, scale=True)
        rn = R.nn.rms_norm(x, g, axes=-1, epsilon=1e-06)
        sl = R.strided_slice(x, axes=[0], begin=[0], end=[s // 2], strides=None, assume_inbound=False)
        parts = R.split(x, indices_or_sections=2, axis=1)
        p0 = parts[0]
        p1 = parts[1]
        cat = R.concat((p0, p1), axis=1)
        tk = R.take(g, idx, axis=0, mode="fast")
        z = R.zeros(R.shape([s, 64]), dtype="float32")
        tr = R.triu(x, k=1)
        ed = R.expand_dims(g, axis=0)
        sq = R.squeeze(ed, axis=[0])
        return (ln, rn, sl, cat, tk, z, tr, sq)
'''

DECORATOR_ATTRS = '''
@I.ir_module
class Module:
    @R.function(private=True)
    def helper(x: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), dtype="float32"):
        y = R.exp(x)
        return y

    @R.function(pure=False)
    def main(x: R.Tensor((4,), dtype="float32")):
        y = R.exp(x)
        return y
'''

TOP_LEVEL_FUNCTION = '''
from distir.script import ir as I, relax as R
from distir.script import tirx as T

@R.function
def main(x: R.Tensor((4, "n"), dtype="float32")) -> R.Tensor((4, "n"), dtype="float32"):
    y = R.nn.relu(x)
    return y
'''

EMPTY_AND_ODD_NAMES = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), dtype="float32")):
        with R.dataflow():
            R.output()
        return x
'''

CORPUS = {
    "static_1d": STATIC_1D,
    "symbolic_1d": SYMBOLIC_1D,
    "symbolic_2d": SYMBOLIC_2D,
    "partials": PARTIALS,
    "tuples_constants": TUPLES_CONSTANTS,
    "several_functions": SEVERAL_FUNCTIONS,
    "global_signature_attrs": GLOBAL_SIGNATURE_ATTRS,
    "transformer_ops": TRANSFORMER_OPS,
    "decorator_attrs": DECORATOR_ATTRS,
    "top_level_function": TOP_LEVEL_FUNCTION,
    "empty_dataflow": EMPTY_AND_ODD_NAMES,
}


def roundtrip(mod: IRModule) -> str:
    """Print, parse back, check structural equality and the fixed point; return the text."""
    text = print_module(mod)
    again = distir.parse(text)
    assert_structural_equal(mod, again)
    assert print_module(again) == text
    return text


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_round_trip(name):
    mod = distir.parse(CORPUS[name])
    text = roundtrip(mod)
    # IRModule.script() is the same printer
    assert mod.script() == text


def test_parse_accepts_the_examples_shipped_with_the_package():
    from distir import examples

    for name in examples.names():
        roundtrip(examples.load(name))


def test_printed_example_matches_the_documented_form():
    text = print_module(distir.parse(SYMBOLIC_1D))
    assert text.startswith(
        "# from distir.script import ir as I\n# from distir.script import relax as R\n"
        "# from distir.script import tirx as T\n\n@I.ir_module\nclass Module:\n"
    )
    assert '    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})\n\n' in text
    # signatures quote symbolic dims; bodies use the names declared by T.int64() (as TVM prints them)
    assert (
        '    def main(x: R.DTensor(("m * num_workers", "n"), "float32", "mesh[0]", "S[0]"), '
        'w: R.Tensor(("n", 64), dtype="float32")) -> R.DTensor(("m * num_workers", 64), "float32", "mesh[0]", "R"):\n'
        "        m = T.int64()\n        n = T.int64()\n        num_workers = T.int64()\n        with R.dataflow():\n"
    ) in text
    assert (
        '            z: R.DTensor((m * num_workers, 64), "float32", "mesh[0]", "R") = '
        'R.dist.redistribute(y, device_mesh="mesh[0]", placement="R")\n            R.output(z)\n        return z\n'
    ) in text


def test_calls_print_every_attribute_as_keyword():
    text = print_module(distir.parse(SEVERAL_FUNCTIONS))
    for piece in (
        "R.permute_dims(x, axes=None)",
        "R.permute_dims(x, axes=[1, 0])",
        "R.reshape(b, R.shape([4, 32]))",
        "R.reshape(c, R.shape([2, -1]))",
        "R.sum(d, axis=None, keepdims=True)",
        "R.mean(d, axis=[0, 1], keepdims=False)",
        "R.max(x, axis=-1, keepdims=False)",
        'R.astype(x, dtype="float16")',
        'R.matmul(x, a, out_dtype="float32")',
        "R.nn.softmax(y, axis=-1)",
    ):
        assert piece in text, piece


def test_parsed_values_have_the_documented_python_types():
    mod = distir.parse(SEVERAL_FUNCTIONS + TRANSFORMER_OPS.split("class Module:")[1].replace("def main", "def third"))
    calls = {b.var.name: b.value for f in mod.functions.values() for b in f.bindings()}
    assert calls["g"].attrs["axis"] == -1 and isinstance(calls["g"].attrs["axis"], int)
    assert calls["f"].attrs["axis"] == (0, 1)
    assert calls["e"].attrs["axis"] is None
    assert calls["b"].attrs["axes"] == (1, 0)
    assert calls["a"].attrs["axes"] is None
    end = calls["sl"].attrs["end"]
    assert isinstance(end, tuple) and sym.to_str(end[0]) == "s // 2"
    assert calls["parts"].attrs["indices_or_sections"] == 2
    assert calls["rn"].attrs["axes"] == -1
    assert calls["ln"].attrs["epsilon"] == 1e-05


def test_constants_keep_values_dtypes_and_non_finite_floats():
    mod = distir.parse(TUPLES_CONSTANTS)
    consts = {b.var.name: b.value.data for b in mod["main"].bindings() if b.var.name.startswith("c")}
    assert consts["c0"].dtype == np.float32 and consts["c0"].shape == () and consts["c0"] == 1.5
    assert consts["c1"].tolist() == [[1.0, 2.0], [3.0, -4.25]]
    assert consts["c2"].dtype == np.int32
    assert consts["c3"].dtype == np.bool_
    c4 = consts["c4"]
    assert math.isinf(c4[0]) and c4[0] > 0 and math.isinf(c4[1]) and c4[1] < 0 and math.isnan(c4[2])
    assert c4[3] == np.float32(0.1)
    assert consts["c5"].dtype == np.float64 and consts["c5"] == 0.1
    text = print_module(mod)
    assert 'R.const([float("inf"), float("-inf"), float("nan"), 0.1], "float32")' in text
    assert 'R.const(0.1, "float64")' in text
    assert 'R.const([0.5, 1e-07], "float16")' in text


def test_types_of_unannotated_bindings_are_inferred():
    mod = distir.parse(PARTIALS)
    types = {b.var.name: b.var.type for b in mod["main"].bindings()}
    assert isinstance(types["p"], DTensorType)
    assert types["p"].placement == Placement((Partial("sum"),))
    assert types["r"].placement.is_replicated
    assert sym.to_str(types["p"].shape[0]) == "8"


def test_annotation_wins_over_inference():
    # the verifier reports the mismatch; the parser records what was written
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32")):
        y: R.Tensor((8, 4), dtype="float16") = R.nn.relu(x)
        return y
'''
    mod = distir.parse(text)
    b = next(mod["main"].bindings())
    assert b.var.type == TensorType((8, 4), "float16")
    assert b.value.type == TensorType((4, 8), "float32")
    roundtrip(mod)


def test_meshes_are_symbolic_and_resolved_to_module_objects():
    mod = distir.parse(SYMBOLIC_2D)
    m0, m1 = mod.meshes()
    assert sym.to_str(m0.shape[1]) == "tp"
    assert sym.equal(m0.device_ids.stop, sym_parse.parse("2 * tp"))
    assert sym.equal(m1.size, sym_parse.parse("dp * tp"))
    x = mod["main"].params[0]
    assert x.type.mesh is m0
    assert x.type.placement == Placement((Shard(0), Shard(1)))
    a = next(mod["main"].bindings())
    assert a.value.attrs["device_mesh"] is m0


def test_spans_point_at_the_source():
    mod = distir.parse(STATIC_1D, source_name="static.ir")
    f = mod["main"]
    # STATIC_1D starts with a newline, so 'def main' is on line 8
    assert f.span.source_name == "static.ir" and (f.span.line, f.span.column) == (8, 5)
    h = next(f.bindings())
    assert (h.span.line, h.span.column) == (10, 13)
    assert (h.var.span.line, h.var.span.column, h.var.span.end_column) == (10, 13, 14)
    assert (h.value.span.line, h.value.span.column) == (10, 17)
    assert h.span.source_line.strip().startswith("h = R.matmul")
    assert f.params[0].span.line == 8


def test_parse_file_reads_files_given_as_str_or_path(tmp_path):
    p = tmp_path / "m.ir"
    p.write_text(STATIC_1D)
    a = distir.parse_file(p)
    b = distir.parse_file(str(p))
    assert structural_equal(a, b)
    assert a.source_name == str(p)
    assert a["main"].span.source_name == str(p)


def test_header_imports_in_known_forms_are_accepted():
    text = (
        "from distir.script import ir as I, relax as R\n"
        "from distir.script import tirx as T\n"
        "from tvm.script import ir as I\nfrom tvm.script import relax as R\nfrom tvm.script import tirx as T\n"
        "import tvm\n" + STATIC_1D
    )
    assert structural_equal(distir.parse(text), distir.parse(STATIC_1D))


def test_printer_makes_names_unique_and_valid():
    from distir.ir import Binding, Block, Function, Var, get_op
    from distir.ir.expr import Call

    t = TensorType((4,), "float32")
    x = Var("x", t)
    relu = get_op("nn.relu")
    vs = [Var(n, t) for n in ("x", "x", "class", "R", "lv.0", "0abc", "x_1", "n")]
    bindings = []
    prev = x
    for v in vs:
        bindings.append(Binding(v, Call(relu, (prev,), {})))
        prev = v
    f = Function("main", (x,), (Block(bindings, is_dataflow=False),), bindings[-1].var)
    mod = IRModule({"main": f})
    text = roundtrip(mod)
    for name in ("x_1:", "x_2:", "class_1:", "R_1:", "lv_0:", "v_0abc:", "x_1_1:"):
        assert f"        {name}" in text, (name, text)


def test_printer_avoids_symbolic_variable_names_for_values():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(n: R.Tensor(("n",), dtype="float32")):
        m = R.nn.relu(n)
        return m
'''
    out = roundtrip(distir.parse(text))
    assert 'def main(n_1: R.Tensor(("n",), dtype="float32")):' in out
    assert "m: R.Tensor((n,), dtype=\"float32\") = R.nn.relu(n_1)" in out


def test_dataflow_outputs_are_the_vars_used_after_the_block():
    from distir.ir import Block

    mod = distir.parse(SEVERAL_FUNCTIONS)
    f = mod["first"]
    # a pass that forgets to update outputs still prints valid text
    blocks = tuple(Block(b.bindings, b.is_dataflow, None) for b in f.blocks)
    mod2 = mod.with_function(f.replace(blocks=blocks))
    text = roundtrip(mod2)
    assert "R.output(z)" in text and "R.output(q)" in text


def test_printing_a_mesh_missing_from_the_module_is_an_error():
    from distir.errors import DistirError

    mod = distir.parse(STATIC_1D)
    with pytest.raises(DistirError, match="not among the module's global infos"):
        print_module(mod.replace(global_infos={}))


def test_print_function_and_function_script_form():
    from distir.script import print_function

    mod = distir.parse(SEVERAL_FUNCTIONS)
    text = print_function(mod["second"], mod)
    assert text.startswith("@R.function\ndef second(x: R.Tensor((8, 16), dtype=\"float32\")):\n")
    again = distir.parse(text)
    assert_structural_equal(again["second"], mod["second"])


def test_type_attrs_round_trip_as_types():
    mod = distir.parse(GLOBAL_SIGNATURE_ATTRS)
    attrs = mod["main"].attrs
    (gp,) = attrs["distir.global_params"]
    assert isinstance(gp, DTensorType) and gp.mesh is mod.meshes()[0]
    assert isinstance(attrs["misc"][0], TupleType)
    text = roundtrip(mod)
    assert '"distir.global_result": R.DTensor((128, 64), "float32", "mesh[0]", "S[0]")' in text


def test_decorator_keywords_are_kept():
    mod = distir.parse(DECORATOR_ATTRS)
    assert mod["helper"].attrs["private"] is True
    assert mod["main"].attrs["pure"] is False
    text = roundtrip(mod)
    assert "@R.function(private=True)\n    def helper" in text
    assert "@R.function(pure=False)\n    def main" in text


def test_sym_parse_handles_mesh_size_expressions():
    assert sym.equal(sym_parse.parse("2 * tp"), sym.mul(2, sym.var("tp")))
    assert sym.equal(sym_parse.parse("m * num_workers"), sym.mul(sym.var("m"), sym.var("num_workers")))
    assert sym_parse.parse("128 // 4") == 32


def test_function_script_is_print_function():
    mod = distir.parse(SYMBOLIC_1D)
    text = mod["main"].script(mod)
    assert text.startswith("@R.function\ndef main(") and '"mesh[0]"' in text
    # without a module, the function's meshes are numbered in order of appearance
    assert mod["main"].script() == text
    plain = distir.parse(SEVERAL_FUNCTIONS)["second"]
    assert_structural_equal(distir.parse(plain.script())["second"], plain)


def test_leaf_values_of_every_kind_round_trip():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")) -> R.Tuple(R.Shape([8, "n"]), R.Prim("int64"), R.Prim("int32")):
        n = T.int64()
        s = R.shape([8, n])
        p = R.prim_value(n * 2)
        q = R.prim_value(T.int32(3))
        w = R.str("a \\"quoted\\" string")
        y = x
        return (s, p, q)
'''
    mod = distir.parse(text)
    out = roundtrip(mod)
    assert "s: R.Shape([8, n]) = R.shape([8, n])" in out
    assert 'p: R.Prim("int64") = R.prim_value(n * 2)' in out
    assert 'q: R.Prim("int32") = R.prim_value(T.int32(3))' in out
    assert 'w: R.Prim("str") = R.str("a \\"quoted\\" string")' in out
    assert 'y: R.Tensor((n, 4), dtype="float32") = x' in out


@pytest.mark.parametrize("src,dst", [("S[0]", "R"), ("P", "S[1]"), ("S[0]", "S[1]"), ("R", "S[0]")])
def test_pass_outputs_round_trip(src, dst):
    from distir.transform import get_pass
    from distir.transform.specialize import Specialize

    text = f'''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]}})

    @R.function
    def main(x: R.DTensor((128, 64), "float32", "mesh[0]", "{src}")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{dst}")
            R.output(y)
        return y
'''
    mod = distir.parse(text)
    for name in ("legalize-redistribute", "lower-global-view-to-local-view"):
        mod = get_pass(name)(mod)
        roundtrip(mod)
    roundtrip(Specialize({"num_workers": 4})(mod))


def test_nested_calls_are_bound_first_as_tvmscript_normalizes_them():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32")):
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            lv = R.add(y, R.exp(y))
            R.output(lv)
        return R.sum(lv, axis=[0])
'''
    mod = distir.parse(text)
    f = mod["main"]
    assert [(b.var.name, b.value.op.name) for b in f.bindings()] == [
        ("lv1", "matmul"), ("y", "nn.relu"), ("lv2", "exp"), ("lv", "add"), ("lv3", "sum"),
    ]
    assert len(f.blocks) == 2 and f.blocks[0].is_dataflow and not f.blocks[1].is_dataflow
    printed = mod.script()
    assert "R.nn.relu(lv1)" in printed and "return lv3" in printed
    assert_structural_equal(distir.parse(printed), mod)
    x, w = np.ones((4, 8), "float32"), np.eye(8, dtype="float32")
    np.testing.assert_allclose(run(mod, x, w), (np.maximum(x @ w, 0) + np.exp(np.maximum(x @ w, 0))).sum(0), rtol=1e-6)
