"""The bundled transformer models (attention, llama, llama_stack): they parse, verify and print
back to the same text, and the single-device interpreter computes what an independent numpy
implementation of each model computes (float64 there, float32 here)."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.errors import DistirError
from distir.examples._stack import layer_param_names
from distir.ir import assert_structural_equal, collect_problems
from distir.ir.types import DTensorType, TensorType
from distir.runtime import run

HIDDEN, HEADS, FFN = 128, 8, 256
HEAD_DIM = HIDDEN // HEADS

# ---------------------------------------------------------------- the numpy reference


def rms_norm(x, w, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rope(xh, cos, sin):
    """Rotary embedding of (s, heads, d) by per-position (s, d) tables: x cos + rotate_half(x) sin."""
    half = xh.shape[-1] // 2
    rotated = np.concatenate([-xh[..., half:], xh[..., :half]], axis=-1)
    return xh * cos[:, None, :] + rotated * sin[:, None, :]


def causal_attention(q, k, v, heads):
    """Per-head softmax(q k^T / sqrt(d) + causal mask) v on (s, heads, d); merged back to (s, heads * d)."""
    s, _, d = q.shape
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
    future = np.triu(np.ones((s, s), dtype=bool), k=1)
    scores = np.where(future, scores - 1e9, scores)
    return np.einsum("hqk,khd->qhd", softmax(scores), v).reshape(s, heads * d)


def attention_block(x, wq, wk, wv, wo, heads=HEADS):
    s = x.shape[0]
    split = (s, heads, x.shape[1] // heads)
    ctx = causal_attention((x @ wq).reshape(split), (x @ wk).reshape(split), (x @ wv).reshape(split), heads)
    return x + ctx @ wo


def llama_layer(x, cos, sin, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, heads=HEADS):
    s, hidden = x.shape
    split = (s, heads, hidden // heads)
    hn = rms_norm(x, attn_norm)
    q = rope((hn @ wq).reshape(split), cos, sin)
    k = rope((hn @ wk).reshape(split), cos, sin)
    v = (hn @ wv).reshape(split)
    h = x + causal_attention(q, k, v, heads) @ wo
    mn = rms_norm(h, mlp_norm)
    return h + (silu(mn @ w_gate) * (mn @ w_up)) @ w_down


def rope_tables(s, d, base=10000.0):
    inv_freq = base ** (-np.arange(0, d, 2) / d)
    freqs = np.outer(np.arange(s), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype("float32"), np.sin(emb).astype("float32")


# ---------------------------------------------------------------- inputs


def _weight(rng, fan_in, fan_out):
    return (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype("float32")


def attention_inputs(s, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((s, HIDDEN)).astype("float32")
    return [x] + [_weight(rng, HIDDEN, HIDDEN) for _ in range(4)]


def layer_weights(rng, hidden=HIDDEN, ffn=FFN):
    def norm():
        return (1.0 + 0.1 * rng.standard_normal(hidden)).astype("float32")

    return [
        norm(),
        *(_weight(rng, hidden, hidden) for _ in range(4)),
        norm(),
        _weight(rng, hidden, ffn),
        _weight(rng, hidden, ffn),
        _weight(rng, ffn, hidden),
    ]


def llama_inputs(s, n_layers=1, seed=0, hidden=HIDDEN, heads=HEADS, ffn=FFN):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((s, hidden)).astype("float32")
    cos, sin = rope_tables(s, hidden // heads)
    layers = [layer_weights(rng, hidden, ffn) for _ in range(n_layers)]
    return [x, cos, sin] + [w for layer in layers for w in layer]


def llama_reference(inputs, n_layers=1, heads=HEADS):
    x, cos, sin, *weights = (a.astype(np.float64) for a in inputs)
    for i in range(n_layers):
        x = llama_layer(x, cos, sin, *weights[9 * i : 9 * i + 9], heads=heads)
    return x


def assert_close(got, want):
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- text: parse, verify, print


@pytest.mark.parametrize("name", ["attention", "llama"])
def test_model_parses_verifies_and_prints_back(name):
    mod = examples.load(name)
    assert collect_problems(mod) == []
    text = mod.script()
    again = distir.parse(text)
    assert again.script() == text
    assert_structural_equal(again, mod)


@pytest.mark.parametrize("name", ["attention", "llama"])
def test_layouts_come_from_parameters_only(name):
    mod = examples.load(name)
    main = mod["main"]
    assert "annotate_sharding" not in examples.text(name) and "redistribute" not in examples.text(name)
    placements = {p.name: str(p.type.placement) for p in main.params if isinstance(p.type, DTensorType)}
    column = {"wq", "wk", "wv", "w_gate", "w_up"}
    row = {"wo", "w_down"}
    for pname, placement in placements.items():
        want = "S[1]" if pname in column else "S[0]" if pname in row else "R"
        assert placement == want, pname
    assert {p.name for p in main.params if isinstance(p.type, TensorType)} >= {"x"}
    assert all(isinstance(b.var.type, TensorType) for b in main.bindings())
    # the sequence length is dynamic, the mesh size symbolic
    assert str(main.params[0].type.shape[0]) == "s"
    assert str(mod.meshes()[0].shape[0]) == "num_workers"


def test_an_unplaced_binding_is_still_checked_for_shape_and_dtype():
    text = examples.text("attention").replace(
        'q: R.Tensor((s, 128), dtype="float32") = R.matmul(x, wq', 'q: R.Tensor((s, 64), dtype="float32") = R.matmul(x, wq'
    )
    problems = collect_problems(distir.parse(text))
    assert len(problems) >= 1 and "binding 'q'" in problems[0] and "Tensor((s, 128)" in problems[0]


# ---------------------------------------------------------------- numbers, single device


@pytest.mark.parametrize("s", [1, 7, 16])
def test_attention_matches_numpy(s):
    inputs = attention_inputs(s, seed=s)
    got = run(examples.load("attention"), *inputs)
    want = attention_block(*(a.astype(np.float64) for a in inputs))
    assert_close(got, want)


@pytest.mark.parametrize("s", [1, 9, 16])
def test_llama_layer_matches_numpy(s):
    inputs = llama_inputs(s, seed=s)
    got = run(examples.load("llama"), *inputs)
    assert_close(got, llama_reference(inputs))


def test_the_causal_mask_matters():
    """A later token must not change an earlier position's output (and does change its own)."""
    mod = examples.load("llama")
    inputs = llama_inputs(6, seed=3)
    base = run(mod, *inputs)
    inputs[0] = inputs[0].copy()
    inputs[0][5] += 1.0
    moved = run(mod, *inputs)
    np.testing.assert_array_equal(base[:5], moved[:5])
    assert not np.allclose(base[5], moved[5])


def test_rotary_embedding_matters():
    """Scores depend on relative positions through cos/sin; identity tables give another result."""
    mod = examples.load("llama")
    inputs = llama_inputs(8, seed=4)
    with_rope = run(mod, *inputs)
    inputs[1], inputs[2] = np.ones_like(inputs[1]), np.zeros_like(inputs[2])
    without = run(mod, *inputs)
    assert not np.allclose(with_rope, without, atol=1e-3)
    assert_close(without, llama_reference(inputs))


# ---------------------------------------------------------------- llama_stack


def test_llama_stack_of_two_layers_runs_and_matches_numpy():
    mod = examples.llama_stack(2)
    assert collect_problems(mod) == []
    assert_structural_equal(distir.parse(mod.script()), mod)  # what the text of the model parses to
    names = [p.name for p in mod["main"].params]
    assert names == ["x", "cos", "sin", *layer_param_names(0), *layer_param_names(1)]
    inputs = llama_inputs(5, n_layers=2, seed=7)
    assert_close(run(mod, *inputs), llama_reference(inputs, n_layers=2))


def test_one_generated_layer_computes_what_the_llama_example_computes():
    inputs = llama_inputs(6, seed=8)
    np.testing.assert_array_equal(run(examples.llama_stack(1), *inputs), run(examples.load("llama"), *inputs))


def test_llama_stack_other_sizes():
    mod = examples.llama_stack(3, hidden=64, heads=4, ffn=96)
    assert collect_problems(mod) == []
    inputs = llama_inputs(4, n_layers=3, seed=9, hidden=64, heads=4, ffn=96)
    assert_close(run(mod, *inputs), llama_reference(inputs, n_layers=3, heads=4))


def test_llama_stack_size_grows_linearly():
    counts = [sum(1 for _ in examples.llama_stack(n)["main"].bindings()) for n in (1, 2, 8)]
    per_layer = counts[1] - counts[0]
    assert counts[2] == counts[0] + 7 * per_layer and per_layer > 30


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((0,), {}, "n_layers must be a positive integer, got 0"),
        ((2,), {"hidden": 100, "heads": 8}, "hidden=100 does not divide into heads=8"),
        ((2,), {"hidden": 24, "heads": 8}, "head size hidden/heads = 3 must be even"),
        ((2,), {"ffn": -1}, "ffn must be a positive integer"),
        ((True,), {}, "n_layers must be a positive integer"),
    ],
)
def test_llama_stack_rejects_bad_sizes(args, kwargs, message):
    with pytest.raises(DistirError, match=message):
        examples.llama_stack(*args, **kwargs)


def test_example_names_list_the_models_but_not_the_generator():
    assert {"attention", "llama", "mlp"} <= set(examples.names())
    assert "_stack" not in examples.names()


def test_the_models_parse_without_binding_annotations_too():
    """Bindings left unannotated: the parser types them (layout-free where the parameters'
    layouts do not fit an op yet), the verifier accepts that, and the numbers do not change."""
    import re

    for name, inputs in (("attention", attention_inputs(5)), ("llama", llama_inputs(5))):
        text = re.sub(r"^(\s+\w+): R\.Tensor\(.*?\) = R\.", r"\1 = R.", examples.text(name), flags=re.MULTILINE)
        assert text.count(": R.Tensor((s") == 0
        mod = distir.parse(text)
        assert collect_problems(mod) == []
        np.testing.assert_array_equal(run(mod, *inputs), run(examples.load(name), *inputs))


# ---------------------------------------------------------------- distributed: propagate, lower, simulate


def _allreduce_bytes_per_worker(w: int, nbytes: int) -> float:
    return 2 * (w - 1) / w * nbytes  # ring all-reduce: reduce-scatter then all-gather


@pytest.mark.parametrize(
    "name, inputs, per_model",
    [
        ("attention", attention_inputs(16, seed=11), 1),
        ("llama", llama_inputs(16, seed=12), 2),
    ],
)
def test_model_distributed_equals_single_device_with_one_all_reduce_per_block(name, inputs, per_model):
    """Megatron layouts from the parameter annotations alone: one all-reduce after the attention
    block's row-parallel projection and one after the MLP's, nothing else, at 1, 2, 4, 8 workers."""
    from distir.testing import assert_sharded_equivalent

    stats = assert_sharded_equivalent(examples.load(name), inputs, num_workers=(1, 2, 4, 8), rtol=1e-5, atol=1e-5)
    activation = 16 * HIDDEN * 4
    for w, st in stats.items():
        assert st.counts == {"all_reduce": per_model}, (w, st.summary())
        assert float(st.bytes_per_worker) == per_model * _allreduce_bytes_per_worker(w, activation), (w, st.summary())


def test_llama_stack_distributed_with_an_odd_sequence_length():
    from distir.testing import assert_sharded_equivalent

    mod = examples.llama_stack(2)
    inputs = llama_inputs(7, n_layers=2, seed=13)
    stats = assert_sharded_equivalent(mod, inputs, num_workers=(1, 2, 4, 8), rtol=1e-5, atol=1e-5)
    assert all(st.counts == {"all_reduce": 4} for st in stats.values())


def test_lowered_llama_is_per_worker_and_prints_back():
    from distir.transform.pipelines import distribute_pipeline

    lowered = distribute_pipeline()(examples.load("llama"))
    main = lowered["main"]
    local = {p.name: p.type for p in main.params}
    assert str(local["wq"]) == 'Tensor((128, T.ceildiv(128, num_workers)), "float32")'
    assert str(local["w_down"]) == 'Tensor((T.ceildiv(256, num_workers), 128), "float32")'
    assert str(local["attn_norm"]) == 'Tensor((128,), "float32")'
    assert collect_problems(lowered) == []
    assert distir.parse(lowered.script()).script() == lowered.script()
