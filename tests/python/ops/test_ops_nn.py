"""softmax, log_softmax, layer_norm, rms_norm: types, errors, whole-axis sharding, references."""

from __future__ import annotations

import numpy as np
import pytest

from distir.errors import TypeInferenceError
from distir.ir import Call, DeviceMesh, DTensorType, Placement, Range, TensorType, Var, get_op, sym
from op_terms import MESH, N, W, D, T, call, ref  # noqa: F401



def test_params_follow_tvm():
    assert [p.name for p in get_op("nn.layer_norm").params] == [
        "data", "gamma", "beta", "axes", "epsilon", "center", "scale"]
    assert [p.name for p in get_op("nn.rms_norm").params] == ["data", "weight", "axes", "epsilon"]
    assert [p.name for p in get_op("nn.softmax").params] == ["data", "axis"]
    assert get_op("nn.layer_norm").param("epsilon").default == 1e-5


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_types_and_sharding(name):
    assert call(name, T(N, 4, 8)).type == TensorType((N, 4, 8), "float32")
    assert call(name, D((N, 4, 8), "S[0]")).type.placement == Placement.parse("S[0]")
    assert call(name, D((N, 4, 8), "S[2]"), axis=1).type.placement == Placement.parse("S[2]")
    with pytest.raises(TypeInferenceError, match=f"R.{name} .* needs whole"):
        _ = call(name, D((N, 4, 8), "S[2]")).type
    with pytest.raises(TypeInferenceError, match="cannot take a partial"):
        _ = call(name, D((N, 8), "P")).type
    with pytest.raises(TypeInferenceError, match="axis 3 is out of range"):
        _ = call(name, T(N, 8), axis=3).type
    with pytest.raises(TypeInferenceError, match="floating-point"):
        _ = call(name, T(N, 8, dtype="int32")).type


def test_softmax_references_are_stable():
    x = np.array([[1000.0, 1001.0, 999.0], [-5.0, 0.0, 5.0]], dtype="float32")
    x64 = x.astype("float64")
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(ref("nn.softmax", x), want, rtol=1e-6)
    np.testing.assert_allclose(ref("nn.log_softmax", x), np.log(want), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ref("nn.softmax", x, axis=0).sum(0), np.ones(3), rtol=1e-6)
    assert ref("nn.softmax", x).dtype == np.float32


# ---------------------------------------------------------------- layer_norm / rms_norm


def test_norm_types():
    x = T(N, 16, 64)
    assert call("nn.layer_norm", x, T(64), T(64)).type == TensorType((N, 16, 64), "float32")
    assert call("nn.layer_norm", x, T(16, 64), T(16, 64), axes=[-2, -1]).type == x.type
    assert call("nn.rms_norm", x, T(64)).type == x.type
    assert call("nn.rms_norm", T(N, 4, 8), T(4), axes=[1]).type == TensorType((N, 4, 8), "float32")


def test_norm_errors():
    with pytest.raises(TypeInferenceError, match=r"R.nn.layer_norm: gamma has shape \(32,\) but must match .*\(64,\)"):
        _ = call("nn.layer_norm", T(N, 64), T(32), T(64)).type
    with pytest.raises(TypeInferenceError, match=r"R.nn.layer_norm: beta has dtype float16"):
        _ = call("nn.layer_norm", T(N, 64), T(64), T(64, dtype="float16")).type
    with pytest.raises(TypeInferenceError, match=r"R.nn.rms_norm: weight has shape"):
        _ = call("nn.rms_norm", T(N, 8, 64), T(64), axes=[1, 2]).type
    with pytest.raises(TypeInferenceError, match="R.nn.rms_norm: axis 2 is out of range"):
        _ = call("nn.rms_norm", T(N, 64), T(64), axes=[2]).type
    with pytest.raises(TypeInferenceError, match="floating-point"):
        _ = call("nn.rms_norm", T(N, 64, dtype="int32"), T(64, dtype="int32")).type


def test_norm_sharding():
    # batch and sequence dims pass
    assert call("nn.rms_norm", D((4, N, 64), "S[1]"), D((64,), "R")).type.placement == Placement.parse("S[1]")
    t = call("nn.layer_norm", D((N, 64), "S[0]"), D((64,), "R"), D((64,), "R")).type
    assert t.placement == Placement.parse("S[0]")
    # the normalised dim must be whole, in data or in the weights
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("nn.rms_norm", D((N, 64), "S[1]"), D((64,), "S[0]")).type
    with pytest.raises(TypeInferenceError, match="R.nn.rms_norm"):
        _ = call("nn.rms_norm", D((N, 64), "R"), D((64,), "S[0]")).type
    # no partial passes: normalisation is not linear
    with pytest.raises(TypeInferenceError, match="cannot take a partial"):
        _ = call("nn.layer_norm", D((N, 64), "P"), D((64,), "R"), D((64,), "R")).type


def test_layer_norm_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 8)).astype("float32") * 4 + 2
    g = rng.standard_normal(8).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    x64 = x.astype("float64")
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    norm = (x64 - mu) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(ref("nn.layer_norm", x, g, b), norm * g + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref("nn.layer_norm", x, g, b, center=False, scale=False), norm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref("nn.layer_norm", x, g, b, center=False), norm * g, rtol=1e-5, atol=1e-6)
    assert ref("nn.layer_norm", x, g, b).dtype == np.float32
    # normalising over a middle axis: parameters broadcast along it
    g5, b5 = g[:5], b[:5]
    mu = x64.mean(1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(1, keepdims=True)
    want = (x64 - mu) / np.sqrt(var + 1e-3) * g5[:, None] + b5[:, None]
    np.testing.assert_allclose(ref("nn.layer_norm", x, g5, b5, axes=[1], epsilon=1e-3), want, rtol=1e-5, atol=1e-6)


def test_rms_norm_reference():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 16)).astype("float32")
    w = rng.standard_normal(16).astype("float32")
    x64 = x.astype("float64")
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(ref("nn.rms_norm", x, w), want, rtol=1e-5, atol=1e-6)
    w2 = rng.standard_normal((7, 16)).astype("float32")
    want = x64 / np.sqrt((x64**2).mean((1, 2), keepdims=True) + 1e-6) * w2
    np.testing.assert_allclose(ref("nn.rms_norm", x, w2, axes=[1, 2], epsilon=1e-6), want, rtol=1e-5, atol=1e-6)
