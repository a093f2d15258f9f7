"""Every attribute the Relax export carries, at a value other than its default, on TVM.

Most programs the other tests export use each op's defaults (TVM's defaults too), so an
export that dropped an attribute, passed it under the wrong keyword or converted it wrongly
would still match. Here each op with a Relax form is called with its attributes set away
from their defaults (one function per case, all in one module and one TVM build), and
TVM's result is compared with distir's interpreter, whose numpy references do not go
through the export. That the interpreter honours each value is checked too: dropping the
attribute from the call (back to its default) changes the interpreter's result, so a
match on TVM is a match on the attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import tvm

import distir
from distir.driver import compare, flat_outputs
from distir.errors import DistirError
from distir.ir import Call
from distir.ir.op import all_ops
from distir.runtime import run
from distir.tvm import to_relax
from tvm_build import one_device_vm

F32 = "float32"


@dataclass(frozen=True)
class Case:
    """``y = R.<op>(<args>, **attrs)`` in a function ``name`` of ``params``; ``data`` gives
    inputs that need particular values (indices, distinct keys), the others are random."""

    name: str
    op: str
    args: str
    attrs: dict[str, str]
    params: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    data: dict[str, np.ndarray] = field(default_factory=dict)

    def text(self) -> str:
        params = ", ".join(f'{n}: R.Tensor({tuple(s)}, "{d}")' for n, (s, d) in self.params.items())
        return self.function(", ".join([self.args, *(f"{k}={v}" for k, v in self.attrs.items())] if self.args
                                       else [f"{k}={v}" for k, v in self.attrs.items()]), params)

    def without(self, attr: str) -> str:
        """The function with ``attr`` left out of the call (the op's default)."""
        return Case(self.name, self.op, self.args, {k: v for k, v in self.attrs.items() if k != attr},
                    self.params, self.data).text()

    def function(self, call_args: str, params: str) -> str:
        return f"""
    @R.function
    def {self.name}({params}):
        with R.dataflow():
            y = R.{self.op}({call_args})
            R.output(y)
        return y
"""

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(sum(map(ord, self.name)))
        out = []
        for n, (shape, dtype) in self.params.items():
            if n in self.data:
                out.append(np.asarray(self.data[n], dtype))
            elif dtype == "bool":
                out.append(rng.random(shape) < 0.4)
            elif dtype.startswith("int"):
                out.append(rng.integers(-20, 20, shape).astype(dtype))
            else:
                out.append(rng.standard_normal(shape).astype(dtype))
        return out


def _t(*shape, dtype=F32):
    return (tuple(shape), dtype)


X46 = {"x": _t(4, 6)}
CASES = [
    # creation
    Case("arange", "arange", "", {"start": "2", "end": "11", "step": "3", "dtype": '"int32"'}),
    Case("full", "full", 'R.shape([2, 3]), R.const(2.5, "float32")', {"dtype": '"int32"'}),
    Case("ones", "ones", "R.shape([2, 3])", {"dtype": '"int32"'}),
    Case("zeros", "zeros", "R.shape([2, 3])", {"dtype": '"int8"'}),
    Case("tril", "tril", "x", {"k": "-1"}, X46),
    Case("triu", "triu", "x", {"k": "2"}, X46),
    # elementwise
    Case("astype", "astype", "x", {"dtype": '"float16"'}, X46),
    Case("clip", "clip", "x", {"min": "-0.5", "max": "0.7"}, X46),
    Case("softplus", "nn.softplus", "x", {"beta": "2.0", "threshold": "1.0"}, X46),
    Case("prelu", "nn.prelu", "x, a", {"axis": "0"}, {"x": _t(4, 6), "a": _t(4)}),
    # reductions (the float form; the integer mean and bool max take emit_reduction's own paths)
    *[Case(op, op, "x", {"axis": "[0]", "keepdims": "True"}, {"x": _t(4, 3, 2)})
      for op in ("sum", "max", "min", "prod")],
    Case("mean", "mean", "x", {"axis": "[0, 2]", "keepdims": "True"}, {"x": _t(4, 3, 2)}),
    Case("mean_int", "mean", "x", {"axis": "[0]", "keepdims": "True"}, {"x": _t(5, 3, dtype="int32")}),
    Case("max_bool", "max", "x", {"axis": "[1]", "keepdims": "True"}, {"x": _t(4, 5, dtype="bool")}),
    Case("min_bool", "min", "x", {"axis": "[0]", "keepdims": "True"}, {"x": _t(3, 5, dtype="bool")},
         {"x": np.array([[1, 1, 0, 1, 1], [1, 0, 1, 1, 1], [1, 1, 1, 1, 0]])}),
    Case("partial_mean", "partial_mean", "x", {"axis": "[1]", "keepdims": "True", "count": "4"}, {"x": _t(3, 5)}),
    Case("partial_mean_bool", "partial_mean", "x", {"axis": "[0]", "keepdims": "True", "count": "4"},
         {"x": _t(4, 5, dtype="bool")}),
    Case("matmul", "matmul", "x, w", {"out_dtype": '"float64"'}, {"x": _t(3, 4), "w": _t(4, 5)}),
    # normalisation
    Case("softmax", "nn.softmax", "x", {"axis": "0"}, X46),
    Case("log_softmax", "nn.log_softmax", "x", {"axis": "0"}, X46),
    Case("layer_norm", "nn.layer_norm", "x, g, b",
         {"axes": "[-2, -1]", "epsilon": "0.5", "center": "False", "scale": "False"},
         {"x": _t(3, 4, 6), "g": _t(4, 6), "b": _t(4, 6)}),
    Case("rms_norm", "nn.rms_norm", "x, g", {"axes": "[-2, -1]", "epsilon": "0.5"}, {"x": _t(3, 4, 6), "g": _t(4, 6)}),
    Case("rms_norm_1d", "nn.rms_norm", "x, g", {"epsilon": "0.5"}, {"x": _t(6), "g": _t(6)}),  # through a (1, n) view
    Case("group_norm", "nn.group_norm", "x, g, b",
         {"num_groups": "2", "channel_axis": "1", "axes": "[2, 3]", "epsilon": "0.5", "center": "False",
          "scale": "False"},
         {"x": _t(2, 4, 3, 3), "g": _t(4), "b": _t(4)}),
    # shape manipulation
    Case("permute_dims", "permute_dims", "x", {"axes": "[1, 0, 2]"}, {"x": _t(2, 3, 4)}),
    Case("expand_dims", "expand_dims", "x", {"axis": "[0, 2]"}, X46),
    Case("squeeze", "squeeze", "x", {"axis": "[1]"}, {"x": _t(4, 1, 1, 3)}),
    Case("concat", "concat", "(x, z)", {"axis": "1"}, {"x": _t(4, 3), "z": _t(4, 2)}),
    Case("split", "split", "x", {"indices_or_sections": "[1, 4]", "axis": "1"}, X46),
    Case("repeat", "repeat", "x", {"repeats": "2", "axis": "1"}, {"x": _t(3, 4)}),
    Case("tile", "tile", "x", {"repeats": "[2, 3]"}, {"x": _t(3, 4)}),
    Case("pad", "nn.pad", "x", {"pad_width": "[1, 0, 0, 2]", "pad_value": "1.5"}, {"x": _t(3, 4)}),
    Case("pad_reflect", "nn.pad", "x", {"pad_width": "[1, 2, 2, 1]", "pad_mode": '"reflect"'}, {"x": _t(4, 4)}),
    # indexing
    Case("strided_slice", "strided_slice", "x",
         {"axes": "[0, 1]", "begin": "[1, 0]", "end": "[4, 5]", "strides": "[2, 2]", "assume_inbound": "True"},
         {"x": _t(5, 6)}),
    Case("take", "take", "x, i", {"axis": "1", "mode": '"wrap"'}, {"x": _t(3, 5), "i": _t(4, dtype="int64")},
         {"i": np.array([7, 0, 4, 11])}),
    Case("shard_take", "shard_take", "x, i", {"axis": "1", "offset": "2"}, {"x": _t(3, 4), "i": _t(5, dtype="int64")},
         {"i": np.array([0, 2, 5, 3, 7])}),
    Case("mask_tail", "mask_tail", "x", {"axis": "1", "length": "3", "value": "2.5"}, X46),
    # sorting and scans
    Case("sort", "sort", "x", {"axis": "0", "descending": "True"}, X46),
    Case("argsort", "argsort", "x", {"axis": "0", "descending": "True", "dtype": '"int64"'}, X46),
    Case("topk", "topk", "x", {"k": "2", "axis": "0", "ret_type": '"indices"', "largest": "False", "dtype": '"int64"'},
         X46),
    Case("topk_values", "topk", "x", {"k": "3", "ret_type": '"values"'}, X46),
    Case("cumsum", "cumsum", "x", {"axis": "0", "dtype": '"float64"', "exclusive": "True"}, X46),
    # convolution and images
    Case("conv1d", "nn.conv1d", "x, w",
         {"strides": "[2]", "padding": "[1, 2]", "dilation": "[2]", "groups": "2", "out_layout": '"NCW"',
          "out_dtype": '"float64"'},
         {"x": _t(1, 4, 9), "w": _t(6, 2, 3)}),
    Case("conv2d", "nn.conv2d", "x, w", {"strides": "[2, 1]", "padding": "[1, 0, 2, 1]", "dilation": "[1, 2]",
                                         "groups": "2", "out_dtype": '"float64"'},
         {"x": _t(1, 4, 7, 6), "w": _t(4, 2, 3, 2)}),
    Case("conv3d", "nn.conv3d", "x, w", {"strides": "[1, 2, 1]", "padding": "[1, 0, 0, 0, 1, 1]",
                                         "dilation": "[1, 1, 2]", "groups": "2", "out_dtype": '"float16"'},
         {"x": _t(1, 2, 4, 5, 5), "w": _t(2, 1, 2, 3, 2)}),
    Case("resize2d", "image.resize2d", "x, R.shape([5, 7])",
         {"layout": '"NHWC"', "method": '"nearest_neighbor"', "coordinate_transformation_mode": '"asymmetric"',
          "rounding_method": '"ceil"', "out_dtype": '"float64"'},
         {"x": _t(1, 3, 4, 2)}),
    Case("resize2d_inert", "image.resize2d", "x, R.shape([5, 7])",
         {"coordinate_transformation_mode": '"align_corners"', "roi": "[0.1, 0.2, 0.9, 0.8]", "cubic_alpha": "-0.5",
          "cubic_exclude": "1", "extrapolation_value": "3.0"},
         {"x": _t(1, 2, 3, 4)}),
    # attention: (batch, seq, heads, head_dim), a key length unlike the query's so BottomRight is not TopLeft
    Case("attention", "nn.attention", "q, k, v", {"scale": "0.3", "causal_mask": '"BottomRight"'},
         {"q": _t(1, 3, 2, 4), "k": _t(1, 5, 2, 4), "v": _t(1, 5, 2, 4)}),
    Case("attention_bias", "nn.attention_bias", "q, k, v, m", {"scale": "0.7", "causal_mask": '"TopLeft"'},
         {"q": _t(1, 3, 2, 4), "k": _t(1, 5, 2, 4), "v": _t(1, 5, 2, 4), "m": _t(1, 2, 3, 5)}),
]

# Attributes a case sets that leave the result as it is, by design: dropping them cannot show.
INERT = {
    ("image.resize2d", "roi"): "used by tf_crop_and_resize only, which distir refuses",
    ("image.resize2d", "cubic_alpha"): "used by the cubic method only, which distir refuses",
    ("image.resize2d", "cubic_exclude"): "used by the cubic method only, which distir refuses",
    ("image.resize2d", "extrapolation_value"): "used by tf_crop_and_resize only, which distir refuses",
    ("strided_slice", "assume_inbound"): "a promise that the bounds are in range; they are",
    ("nn.conv1d", "out_layout"): "only the data layout is modelled, which is what None means",
}

# Attributes no case can set away from the default: distir refuses any other value, with these
# messages (tested below).
_LAYOUTS = r"R\.nn\.conv{}d: distir models the layouts data NC\w*, kernel OI\w*, out NC\w*; got "
_WINDOW = r"R\.{}: sliding-window attention \(window_size\) is not supported"
REFUSED = {
    **{(f"nn.conv{n}d", a): _LAYOUTS.format(n) for n in (1, 2, 3) for a in ("data_layout", "kernel_layout")},
    **{(f"nn.conv{n}d", "out_layout"): _LAYOUTS.format(n) for n in (2, 3)},
    ("nn.attention", "window_size"): _WINDOW.format("nn.attention"),
    ("nn.attention_bias", "window_size"): _WINDOW.format("nn.attention_bias"),
}


def module_text(functions: list[str]) -> str:
    return "@I.ir_module\nclass Module:" + "".join(functions)


@pytest.fixture(scope="module")
def module():
    """Every case, one function each, in one module."""
    return distir.parse(module_text([c.text() for c in CASES]))


@pytest.fixture(scope="module")
def vm(module):
    """The module exported and built once."""
    return one_device_vm(to_relax(module))


def _numpy(out) -> tuple[np.ndarray, ...]:
    if hasattr(out, "numpy"):
        return (out.numpy(),)
    return tuple(a for f in out for a in _numpy(f))


def _calls(mod) -> list[Call]:
    return [b.value for f in mod.functions.values() for blk in f.blocks for b in blk.bindings
            if isinstance(b.value, Call)]


def _lists(v):
    return [_lists(x) for x in v] if isinstance(v, (list, tuple)) else v


def _same(a, b) -> bool:
    return _lists(a) == _lists(b)


def test_every_attribute_of_an_exported_op_is_set_away_from_its_default(module):
    """Each attribute of each op with a Relax form: a case gives it a value other than its default
    (a required one: any value), or it is refused at every other value."""
    set_away = {(c.op.name, k) for c in _calls(module) for k, v in c.attrs.items()
                if c.op.param(k).required or not _same(v, c.op.param(k).default)}
    wanted = {(name, p.name) for name, op in all_ops().items() if op.relax is not None for p in op.attr_params}
    missing = sorted(wanted - set_away - REFUSED.keys())
    assert not missing, f"attributes no case sets away from their default: {missing}"
    assert set(INERT) <= set_away


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tvm_computes_what_the_interpreter_computes(module, vm, case):
    inputs = case.inputs()
    expected = flat_outputs(run(module, *inputs, func=case.name))
    got = _numpy(vm[case.name](*[tvm.runtime.tensor(a) for a in inputs]))
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    c = compare(got, expected)  # the dtype's tolerance: 1e-5 for float32 and float64, looser for float16
    assert c.ok, c.mismatch


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_attribute_changes_what_the_interpreter_computes(case):
    """Left out, each attribute the case sets changes the result (its values, shape, dtype or
    number of outputs), or the call is refused: the comparison on TVM sees every one."""
    inputs = case.inputs()
    full = flat_outputs(run(distir.parse(module_text([case.text()])), *inputs, func=case.name))
    for attr in case.attrs:
        op = all_ops()[case.op]
        if op.param(attr).required or (case.op, attr) in INERT:
            continue
        try:
            dropped = flat_outputs(run(distir.parse(module_text([case.without(attr)])), *inputs, func=case.name))
        except DistirError:
            continue  # refused at the default (a take out of range in mode fast): not the same result
        same = (len(dropped) == len(full) and all(d.dtype == f.dtype for d, f in zip(dropped, full))
                and compare(dropped, full, rtol=1e-6, atol=1e-6).ok)
        assert not same, f"R.{case.op}'s {attr} at its default gives the same result: choose a case where it shows"


@pytest.mark.parametrize("op, attr", sorted(REFUSED), ids=lambda v: v)
def test_the_attributes_no_case_sets_are_refused_away_from_their_default(op, attr):
    case = {"nn.conv1d": ("x, w", {"x": _t(1, 4, 9), "w": _t(6, 4, 3)}, '"NWC"'),
            "nn.conv2d": ("x, w", {"x": _t(1, 4, 7, 6), "w": _t(4, 4, 3, 2)}, '"NHWC"'),
            "nn.conv3d": ("x, w", {"x": _t(1, 2, 4, 5, 5), "w": _t(2, 2, 2, 3, 2)}, '"NDHWC"'),
            "nn.attention": ("q, k, v", {"q": _t(1, 3, 2, 4), "k": _t(1, 5, 2, 4), "v": _t(1, 5, 2, 4)}, "2"),
            "nn.attention_bias": ("q, k, v, m", {"q": _t(1, 3, 2, 4), "k": _t(1, 5, 2, 4), "v": _t(1, 5, 2, 4),
                                                 "m": _t(1, 2, 3, 5)}, "2")}
    args, params, value = case[op]
    if attr == "kernel_layout":
        value = value.replace("N", "O").replace("C", "I")
    text = module_text([Case("f", op, args, {attr: value}, params).text()])
    with pytest.raises(DistirError, match=REFUSED[op, attr]):
        distir.parse(text)
