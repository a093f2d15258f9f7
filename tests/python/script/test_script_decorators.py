"""The Python decorators: ``@I.ir_module`` classes and ``@R.function`` defs, as in TVM's own tests."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import distir
from distir.errors import ParseError
from distir.ir import Function, IRModule, assert_structural_equal, structural_equal
from distir.script import ir as I
from distir.script import relax as R
from distir.script import tirx as T
from distir.transform import Canonicalize


@R.function
def top_level(x: R.Tensor((4, "n"), dtype="float32")) -> R.Tensor((4, "n"), dtype="float32"):
    y = R.nn.relu(x)
    return y


@I.ir_module
class ModuleAtTopLevel:
    I.module_attrs({"device_num": 2})
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[0]")) -> R.DTensor((8, 8), "float32", "mesh[0]", "R"):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y


def test_ir_module_class_becomes_an_irmodule():
    assert isinstance(ModuleAtTopLevel, IRModule)
    assert ModuleAtTopLevel.attrs["device_num"] == 2
    text = '''
@I.ir_module
class Module:
    I.module_attrs({"device_num": 2})
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[0]")) -> R.DTensor((8, 8), "float32", "mesh[0]", "R"):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
'''
    assert_structural_equal(ModuleAtTopLevel, distir.parse(text))


def test_top_level_function_becomes_a_function():
    assert isinstance(top_level, Function)
    assert top_level.name == "top_level"
    assert "R.nn.relu(x)" in distir.script.print_function(top_level)


def test_function_defined_inside_a_test_is_parsed_too():
    @R.function
    def local(x: R.Tensor((4,), dtype="float32")):
        y = R.exp(x)
        return y

    assert isinstance(local, Function)
    assert [b.var.name for b in local.bindings()] == ["y"]


def test_function_inside_a_plain_class_is_left_alone():
    class Plain:
        @R.function
        def f(x: R.Tensor((4,), dtype="float32")):
            return x

        @R.function(private=True)
        def g(x: R.Tensor((4,), dtype="float32")):
            return x

    assert inspect.isfunction(Plain.f) and inspect.isfunction(Plain.g)


def test_before_expected_with_a_pass():
    @I.ir_module
    class Before:
        I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

        @R.function
        def main(x: R.DTensor((128, "n"), "float32", "mesh[0]", "S[0]")) -> R.DTensor((128, "n"), "float32", "mesh[0]", "S[0]"):
            n = T.int64()
            with R.dataflow():
                a = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[0]")
                dead = R.nn.relu(a)
                b: R.DTensor((128, n), "float32", "mesh[0]", "S[0]") = R.nn.gelu(a)
                R.output(b)
            return b

    @I.ir_module
    class Expected:
        I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

        @R.function
        def main(x: R.DTensor((128, "n"), "float32", "mesh[0]", "S[0]")) -> R.DTensor((128, "n"), "float32", "mesh[0]", "S[0]"):
            n = T.int64()
            with R.dataflow():
                b: R.DTensor((128, n), "float32", "mesh[0]", "S[0]") = R.nn.gelu(x)
                R.output(b)
            return b

    After = Canonicalize()(Before)
    assert_structural_equal(After, Expected)
    assert not structural_equal(Before, Expected)


def test_errors_point_at_the_line_and_column_of_the_python_file():
    line = inspect.currentframe().f_lineno
    with pytest.raises(ParseError) as info:

        @I.ir_module
        class Broken:
            @R.function
            def main(x: R.Tensor((4,), dtype="float32")):
                y = R.ad(x, x)
                return y

    err = info.value
    assert err.span.source_name == __file__
    assert err.span.line == line + 7
    source_line = inspect.getsourcelines(test_errors_point_at_the_line_and_column_of_the_python_file)[0][8]
    assert err.span.source_line == source_line.rstrip("\n")
    assert err.span.column == source_line.index("R.ad") + 1
    assert "unknown op 'R.ad'; did you mean R.add?" in str(err)
    assert source_line.rstrip("\n") in str(err)


def test_spans_of_decorated_modules_are_in_file_coordinates():
    f = ModuleAtTopLevel["main"]
    src = Path(__file__).read_text().splitlines()
    assert src[f.span.line - 1].lstrip().startswith("def main(")
    b = next(f.bindings())
    assert src[b.span.line - 1][b.span.column - 1 :].startswith("y = R.dist.redistribute")


def test_placeholders_are_inert():
    # what Python evaluates while a class body or def signature is defined
    assert R.Tensor((4, "n"), dtype="float32") is not None
    R.DTensor((4,), "float32", "mesh[0]", "S[0]")
    R.Tuple(R.Tensor((1,), "float32"), R.Prim("int64"))
    R.Shape([4, "n"])
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})
    I.module_attrs({"a": 1})
    R.nn.softmax(None, axis=-1)
    R.dist.redistribute(None, device_mesh="mesh[0]", placement="R")
    R.anything.at.all(1, 2)
    T.int64()
    with pytest.raises(AttributeError, match="module 'R' has no attribute '__wrapped__'"):
        R.__wrapped__  # noqa: B018
    with pytest.raises(AttributeError, match="^__code__$"):
        R.nn.__code__  # noqa: B018
    with pytest.raises(AttributeError, match="module 'T' has no attribute '_private'"):
        T._private  # noqa: B018


def test_ir_module_needs_a_class():
    with pytest.raises(TypeError, match="@I.ir_module decorates a class"):
        I.ir_module(lambda: None)
