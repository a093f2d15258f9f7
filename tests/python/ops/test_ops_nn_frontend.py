"""The ops TVM's nn frontend emits that distir declares for it: attention, sort/argsort/topk/cumsum,
convolutions, resize, group_norm, pad, repeat, tile, broadcast_to, arange, clip, softplus, prelu.
Their type rules and one-line errors, how they shard, their numpy references, and (property tests)
their distributed runs equal to one device at random sizes, cuts and counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distir
from distir.errors import TypeInferenceError
from distir.ir import Call, DeviceMesh, DTensorType, Placement, Range, ShapeExpr, TensorType, Var, get_op, sym
from distir.testing import assert_sharded_equivalent
from op_terms import MESH, N, W, D, T, call, ref  # noqa: F401



def placement(e) -> str:
    t = e.type
    return [str(f.placement) for f in t.fields] if hasattr(t, "fields") else str(t.placement)


# ---------------------------------------------------------------- type rules and their errors


@pytest.mark.parametrize("make, message", [
    (lambda: call("nn.attention", T(1, 4, 8, 2), T(1, 4, 2, 2), T(1, 4, 2, 2)),
     r"key \(1, 4, 2, 2\) has heads 2, but 8 is expected; repeat the key and value heads \(R\.repeat\)"),
    (lambda: call("nn.attention", T(1, 4, 2, 2), T(1, 4, 2, 2), T(1, 4, 2, 2), window_size=2),
     r"sliding-window attention \(window_size\) is not supported"),
    (lambda: call("nn.attention", T(4, 2, 2), T(4, 2, 2), T(4, 2, 2)), r"query must be 4-D"),
    (lambda: call("nn.attention_bias", T(1, 4, 2, 2), T(1, 3, 2, 2), T(1, 3, 2, 2), T(1, 2, 4, 4)),
     r"bias must be 4-D float32, broadcastable to \(batch, heads, seq_len, seq_len_kv\) = \(1, 2, 4, 3\)"),
    (lambda: call("nn.pad", T(3, 4), pad_width=[1, 1]), r"pad_width needs a \(before, after\) pair for each of the 2"),
    (lambda: call("nn.conv2d", T(1, 3, 5, 5), T(4, 3, 3, 3), data_layout="NHWC"),
     r"distir models the layouts data NCHW, kernel OIHW, out NCHW; got NHWC, OIHW, None \(transpose with R\.permute_dims\)"),
    (lambda: call("nn.conv2d", T(1, 3, 5, 5), T(4, 2, 3, 3)), r"weight \(4, 2, 3, 3\) takes 2 channels per group"),
    (lambda: call("image.resize2d", T(1, 3, 4, 4), ShapeExpr((8, 8)), method="cubic"),
     r"method 'cubic' is not modelled; use nearest_neighbor or linear"),
    (lambda: call("topk", T(3, 4), k=5), r"k=5 is more than the 4 elements of axis 1"),
    (lambda: call("cumsum", T(3, 4, dtype="bool"), axis=1), r"a bool tensor needs dtype="),
    (lambda: call("nn.group_norm", T(2, 6, 3), T(6), T(6), num_groups=4, channel_axis=1, axes=[2]),
     r"4 groups must divide the 6 channels of axis 1"),
    (lambda: call("repeat", T(3, 4), repeats=0, axis=0), r"repeats must be at least 1"),
    (lambda: call("broadcast_to", T(3, 4), ShapeExpr((3, 5))), r"dim 1 of \(3, 4\) is 4, which broadcasts only to itself"),
    (lambda: call("arange", start=0, end=N, step=0, dtype="int32"), r"step must be a nonzero integer constant"),
])
def test_type_errors_name_the_op_and_say_why(make, message):
    with pytest.raises(TypeInferenceError, match=message):
        _ = make().type


def test_output_types():
    assert call("arange", start=2, end=sym.add(N, 2), step=1, dtype="int32").type == TensorType((N,), "int32")
    assert call("arange", start=0, end=7, step=2, dtype="float32").type == TensorType((4,), "float32")
    assert call("repeat", T(N, 4), repeats=3, axis=0).type == TensorType((sym.mul(N, 3), 4), "float32")
    assert call("tile", T(2, 3), repeats=[2, 1, 2]).type == TensorType((2, 2, 6), "float32")
    assert call("nn.pad", T(N, 4), pad_width=[0, 0, 1, 2]).type == TensorType((N, 7), "float32")
    topk = call("topk", T(N, 5), k=2, dtype="int64").type
    assert [f.shape for f in topk.fields] == [(N, 2), (N, 2)] and topk.fields[1].dtype == "int64"
    assert call("cumsum", T(3, 4)).type == TensorType((12,), "float32")
    conv = call("nn.conv2d", T(N, 4, 7, 6), T(6, 4, 3, 3), strides=[2, 2], padding=[1, 1, 1, 1])
    assert conv.type == TensorType((N, 6, 4, 3), "float32")
    resize = call("image.resize2d", T(N, 3, 4, 5), ShapeExpr((8, 10)), method="nearest_neighbor")
    assert resize.type == TensorType((N, 3, 8, 10), "float32")


# ---------------------------------------------------------------- how they shard


def test_attention_passes_batch_and_heads_and_keeps_the_key_length_whole():
    q = D((2, N, 4, 8), "S[2]")
    assert placement(call("nn.attention", q, q, q, causal_mask="TopLeft")) == "S[2]"
    rows = D((2, N, 4, 8), "S[1]")
    kv = D((2, N, 4, 8), "R")
    assert placement(call("nn.attention", rows, kv, kv)) == "S[1]"  # query rows, no mask
    with pytest.raises(TypeInferenceError, match="R.nn.attention needs whole"):
        _ = call("nn.attention", rows, kv, kv, causal_mask="TopLeft").type  # a causal mask needs the rows' positions
    with pytest.raises(TypeInferenceError, match="R.nn.attention needs whole"):
        _ = call("nn.attention", kv, rows, rows).type  # the key length is softmaxed over


def test_sorting_keeps_its_axis_whole_and_passes_the_rest():
    rows = D((N, 7), "S[0]")
    assert placement(call("topk", rows, k=3)) == ["S[0]", "S[0]"]
    assert placement(call("cumsum", rows, axis=1)) == "S[0]"
    for name, attrs in (("sort", {}), ("argsort", {}), ("topk", {"k": 2}), ("cumsum", {"axis": 1})):
        with pytest.raises(TypeInferenceError, match=f"R.{name} needs whole"):
            _ = call(name, D((N, 7), "S[1]"), **attrs).type
    with pytest.raises(TypeInferenceError, match="cannot take a partial"):
        _ = call("cumsum", D((N, 7), "P"), axis=1).type


def test_conv_cuts_batch_and_output_channels_and_leaves_partial_sums_over_input_channels():
    x, w = D((N, 4, 5, 5), "S[0]"), D((6, 4, 3, 3), "R")
    assert placement(call("nn.conv2d", x, w)) == "S[0]"
    assert placement(call("nn.conv2d", D((N, 4, 5, 5), "R"), D((6, 4, 3, 3), "S[0]"))) == "S[1]"
    assert placement(call("nn.conv2d", D((N, 4, 5, 5), "S[1]"), D((6, 4, 3, 3), "S[1]"))) == "P"
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("nn.conv2d", D((N, 4, 5, 5), "S[2]"), w).type  # a window crosses the block edge
    with pytest.raises(TypeInferenceError, match="needs whole"):  # grouped: channels stay whole
        _ = call("nn.conv2d", D((N, 4, 5, 5), "S[1]"), D((4, 2, 3, 3), "R"), groups=2).type


def test_shape_ops_shard():
    assert placement(call("repeat", D((N, 4), "S[0]"), repeats=2, axis=0)) == "S[0]"
    assert placement(call("repeat", D((N, 4), "S[1]"), repeats=2, axis=0)) == "S[1]"
    assert placement(call("tile", D((N, 4), "S[0]"), repeats=[1, 2])) == "S[0]"
    with pytest.raises(TypeInferenceError, match="R.tile needs whole"):
        _ = call("tile", D((N, 4), "S[1]"), repeats=[1, 2]).type
    assert placement(call("broadcast_to", D((1, N, 4), "S[1]"), ShapeExpr((3, N, 4)))) == "S[1]"
    assert placement(call("nn.pad", D((N, 4), "S[0]"), pad_width=[0, 0, 1, 1])) == "S[0]"
    assert placement(call("nn.pad", D((N, 4), "P"), pad_width=[0, 0, 1, 1])) == "P"  # zeros around partial sums
    with pytest.raises(TypeInferenceError, match="cannot take a partial"):
        _ = call("nn.pad", D((N, 4), "P"), pad_width=[0, 0, 1, 1], pad_value=1.0).type
    assert placement(call("clip", D((N, 4), "P[max]"), min=0, max=6)) == "P[max]"


# ---------------------------------------------------------------- references


def test_ties_are_ordered_by_index_in_both_directions_as_tvm_does():
    x = np.array([[1, 3, 3, 2, 3, 1]], "float32")
    np.testing.assert_array_equal(ref("argsort", x), [[0, 5, 3, 1, 2, 4]])
    np.testing.assert_array_equal(ref("argsort", x, descending=True), [[1, 2, 4, 3, 0, 5]])
    values, indices = ref("topk", x, k=3)
    np.testing.assert_array_equal(indices, [[1, 2, 4]])
    np.testing.assert_array_equal(ref("topk", x, k=3, largest=False)[1], [[0, 5, 3]])
    np.testing.assert_array_equal(ref("sort", x, descending=True), [[3, 3, 3, 2, 1, 1]])
    i = np.array([2, 7, 7, 1, 7], "int32")
    np.testing.assert_array_equal(ref("topk", i, k=2, axis=0, ret_type="indices"), [1, 2])


def test_cumsum_reference():
    i = np.array([2, 7, 7, 1, 7], "int32")
    np.testing.assert_array_equal(ref("cumsum", i, axis=0), [2, 9, 16, 17, 24])
    np.testing.assert_array_equal(ref("cumsum", i, axis=0, exclusive=True), [0, 2, 9, 16, 17])
    big = np.array([2**31 - 1, 1], "int32")  # wraps in int32, as TVM's does
    assert ref("cumsum", big, axis=0).tolist() == [2**31 - 1, -(2**31)]
    assert ref("cumsum", np.array([[True, False], [True, True]]), dtype="int32").tolist() == [1, 1, 2, 3]


def test_conv_reference_is_the_sum_over_the_window():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 6, 5)).astype("float32"), rng.standard_normal((6, 2, 3, 2)).astype("float32")
    got = ref("nn.conv2d", x, w, strides=[2, 1], padding=[1, 0, 1, 1], dilation=[1, 2], groups=2)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (0, 1)])
    want = np.zeros(got.shape)
    for n, o, i, j in np.ndindex(*got.shape):
        g = o // 3
        patch = xp[n, 2 * g:2 * g + 2, 2 * i:2 * i + 3, j:j + 3:2]
        want[n, o, i, j] = np.sum(patch * w[o])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_attention_reference_masks_as_tvm():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 2, 1, 4)), rng.standard_normal((1, 3, 1, 4))
    q, k = q.astype("float32"), k.astype("float32")
    # BottomRight with 2 queries and 3 keys: query i sees keys j <= i + 1
    out = ref("nn.attention", q, k, k, causal_mask="BottomRight")
    scores = (q[0, :, 0] @ k[0, :, 0].T) / 2.0
    for i in range(2):
        p = np.exp(scores[i, :i + 2] - scores[i, :i + 2].max())
        np.testing.assert_allclose(out[0, i, 0], (p / p.sum()) @ k[0, :i + 2, 0], rtol=1e-5)


# ---------------------------------------------------------------- distributed runs equal one device

HEADER = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor(SHAPE, "DTYPE", "mesh[0]", "PLACEMENT")):
        with R.dataflow():
            y = CALL
            R.output(y)
        return y
"""

_CALLS = {  # name -> (rank, dtype, the call on x)
    "sort": (2, "float32", "R.sort(x, axis=1, descending=True)"),
    "argsort": (2, "int32", "R.argsort(x, axis=0)"),
    "topk": (2, "int32", "R.topk(x, k=1, axis=1)"),
    "cumsum": (2, "int32", "R.cumsum(x, axis=1, exclusive=True)"),
    "repeat": (2, "float32", "R.repeat(x, repeats=3, axis=0)"),
    "tile": (2, "float32", "R.tile(x, repeats=[1, 2])"),
    "pad": (2, "float32", 'R.nn.pad(x, pad_width=[0, 0, 1, 2], pad_mode="reflect")'),
    "clip": (2, "float32", "R.clip(x, min=-0.5, max=0.5)"),
    "attention": (4, "float32", 'R.nn.attention(x, x, x, causal_mask="TopLeft")'),
    "group_norm": (4, "float32", "R.nn.group_norm(x, R.const(np.ones(4), \"float32\"), R.const(np.zeros(4), \"float32\"), "
                                 "num_groups=2, channel_axis=1, axes=[2, 3])"),
}


def _module(name: str, shape, dim: int):
    rank, dtype, text = _CALLS[name]
    src = HEADER.replace("SHAPE", str(tuple(shape))).replace("DTYPE", dtype).replace("PLACEMENT", f"S[{dim}]")
    if name == "group_norm":  # a constant of the channels
        text = text.replace('R.const(np.ones(4), "float32")', "g").replace('R.const(np.zeros(4), "float32")', "b")
        src = src.replace("        with R.dataflow():", '        with R.dataflow():\n            g = R.ones(R.shape([4]), "float32")'
                          '\n            b = R.zeros(R.shape([4]), "float32")')
    return distir.parse(src.replace("CALL", text)), dtype


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(sorted(_CALLS)),
    sizes=st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=4, max_size=4),
    dim=st.integers(0, 3),
    counts=st.lists(st.sampled_from([2, 3, 5, 6, 7]), min_size=2, max_size=2, unique=True),
    seed=st.integers(0, 3),
)
def test_a_cut_input_runs_exactly_at_every_count(name, sizes, dim, counts, seed):
    """Any dim cut, sizes of 1, sizes below the count and sizes the count does not divide: propagation
    gathers what the op needs whole, and the result equals one device."""
    rank, _, _ = _CALLS[name]
    shape = list(sizes[:rank])
    if name == "attention":
        shape[0] = 1
    if name == "group_norm":
        shape[1] = 4
    mod, dtype = _module(name, shape, dim % rank)
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype) if dtype == "int32" else rng.standard_normal(shape).astype(dtype)
    assert_sharded_equivalent(mod, [x], num_workers=[1, *counts])
