"""A generator of Llama-like models with any number of decoder layers, built with the IR builder.

Each layer is the `llama` example's layer (rms_norm, rotary causal attention, SwiGLU MLP,
residuals) with its own parameters, laid out Megatron style by their DTensor annotations
only; the causal mask is built once and shared. Used to measure how passes scale with
model size (thousands of bindings at 80 layers).
"""

from __future__ import annotations

import math

from .. import ops
from ..errors import DistirError
from ..ir import IRModule
from ..ir.builder import FunctionBuilder, dtensor, mesh, module_of, tensor

__all__ = ["llama_stack"]

_LAYER_PARAMS = (
    # (name, shape, placement); shapes use H (hidden) and F (ffn)
    ("attn_norm", ("H",), "R"),
    ("wq", ("H", "H"), "S[1]"),
    ("wk", ("H", "H"), "S[1]"),
    ("wv", ("H", "H"), "S[1]"),
    ("wo", ("H", "H"), "S[0]"),
    ("mlp_norm", ("H",), "R"),
    ("w_gate", ("H", "F"), "S[1]"),
    ("w_up", ("H", "F"), "S[1]"),
    ("w_down", ("F", "H"), "S[0]"),
)


def layer_param_names(layer: int) -> list[str]:
    """Parameter names of layer ``layer`` in the order :func:`llama_stack` declares them."""
    return [f"l{layer}_{name}" for name, _, _ in _LAYER_PARAMS]


def _check(n_layers: int, hidden: int, heads: int, ffn: int) -> int:
    for what, v in (("n_layers", n_layers), ("hidden", hidden), ("heads", heads), ("ffn", ffn)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise DistirError(f"llama_stack: {what} must be a positive integer, got {v!r}")
    if hidden % heads:
        raise DistirError(f"llama_stack: hidden={hidden} does not divide into heads={heads}")
    head_dim = hidden // heads
    if head_dim % 2:
        raise DistirError(f"llama_stack: the head size hidden/heads = {head_dim} must be even for the rotary embedding")
    return head_dim


def llama_stack(n_layers: int, *, hidden: int = 128, heads: int = 8, ffn: int = 256) -> IRModule:
    """``n_layers`` Llama decoder layers chained, on a symbolic 1-D mesh (``mod.script()`` prints it).

    Inputs: ``x: (s, hidden)``, ``cos``/``sin: (s, hidden // heads)``, then per layer ``i``
    the parameters ``l{i}_attn_norm, l{i}_wq, l{i}_wk, l{i}_wv, l{i}_wo, l{i}_mlp_norm,
    l{i}_w_gate, l{i}_w_up, l{i}_w_down`` (see :func:`layer_param_names`). The sequence
    length ``s`` is dynamic.
    """
    hd = _check(n_layers, hidden, heads, ffn)
    half = hd // 2
    sizes = {"H": hidden, "F": ffn}
    m = mesh(("num_workers",))
    b = FunctionBuilder("main", meshes=[m], plain_bindings=True)  # layouts from the parameters only
    x = b.param("x", tensor(("s", hidden)))
    cos = b.param("cos", tensor(("s", hd)))
    sin = b.param("sin", tensor(("s", hd)))
    weights = [
        {name: b.param(f"l{i}_{name}", dtensor(tuple(sizes[d] for d in shape), "float32", m, placement))
         for name, shape, placement in _LAYER_PARAMS}
        for i in range(n_layers)
    ]
    scale = b.const(1.0 / math.sqrt(hd), "float32")
    with b.dataflow():
        cos_b = b.call("expand_dims", cos, axis=[1], name="cos_b")
        sin_b = b.call("expand_dims", sin, axis=[1], name="sin_b")
        neg = b.call("full", ["s", "s"], b.const(-1e9, "float32"), dtype="float32", name="neg")
        mask = b.call("triu", neg, k=1, name="mask")
        for i, w in enumerate(weights):
            x = _layer(b, f"l{i}_", x, w, cos_b, sin_b, mask, scale, hidden, heads, hd, half)
    return module_of(b.ret(x, tensor(("s", hidden))), meshes=[m])


def _layer(b: FunctionBuilder, p: str, x, w, cos_b, sin_b, mask, scale, hidden: int, heads: int, hd: int, half: int):
    """One decoder layer on ``x``; the bindings are named ``{p}<what>``."""

    def call(name, op, *args, **attrs):
        return b.call(op, *args, name=p + name, **attrs)

    hn = call("hn", "nn.rms_norm", x, w["attn_norm"], axes=[-1], epsilon=1e-5)
    proj = {n: call(n, "matmul", hn, w[f"w{n}"], out_dtype=None) for n in ("q", "k", "v")}
    heads_of = {n: call(f"{n}_h", "reshape", proj[n], ["s", heads, hd]) for n in ("q", "k", "v")}
    rotated = {}
    for n in ("q", "k"):
        h = heads_of[n]
        lo = call(f"{n}_lo", "strided_slice", h, axes=[2], begin=[0], end=[half])
        hi = call(f"{n}_hi", "strided_slice", h, axes=[2], begin=[half], end=[hd])
        hi_n = call(f"{n}_hi_n", "negative", hi)
        rot = call(f"{n}_rot", "concat", [hi_n, lo], axis=2)
        with_cos = call(f"{n}_cos", "multiply", h, cos_b)
        with_sin = call(f"{n}_sin", "multiply", rot, sin_b)
        rotated[n] = call(f"{n}_r", "add", with_cos, with_sin)
    q_t = call("q_t", "permute_dims", rotated["q"], axes=[1, 0, 2])
    k_t = call("k_t", "permute_dims", rotated["k"], axes=[1, 2, 0])
    v_t = call("v_t", "permute_dims", heads_of["v"], axes=[1, 0, 2])
    scores = call("scores", "matmul", q_t, k_t, out_dtype=None)
    scaled = call("scaled", "multiply", scores, scale)
    masked = call("masked", "add", scaled, mask)
    probs = call("probs", "nn.softmax", masked, axis=-1)
    ctx = call("ctx", "matmul", probs, v_t, out_dtype=None)
    ctx_t = call("ctx_t", "permute_dims", ctx, axes=[1, 0, 2])
    ctx_m = call("ctx_m", "reshape", ctx_t, ["s", hidden])
    attn = call("attn", "matmul", ctx_m, w["wo"], out_dtype=None)
    h = call("h", "add", x, attn)
    mn = call("mn", "nn.rms_norm", h, w["mlp_norm"], axes=[-1], epsilon=1e-5)
    gate = call("gate", "matmul", mn, w["w_gate"], out_dtype=None)
    up = call("up", "matmul", mn, w["w_up"], out_dtype=None)
    act = call("act", "nn.silu", gate)
    gu = call("gu", "multiply", act, up)
    down = call("down", "matmul", gu, w["w_down"], out_dtype=None)
    return call("y", "add", h, down)
