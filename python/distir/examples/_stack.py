"""A generator of Llama-like models with any number of decoder layers, as IR text.

Each layer is the `llama` example's layer (rms_norm, rotary causal attention, SwiGLU MLP,
residuals) with its own parameters, laid out Megatron style by their DTensor annotations
only; the causal mask is built once and shared. Used to measure how passes scale with
model size (thousands of bindings at 80 layers).
"""

from __future__ import annotations

import math

from ..errors import DistirError

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


def llama_stack(n_layers: int, *, hidden: int = 128, heads: int = 8, ffn: int = 256) -> str:
    """IR text of ``n_layers`` Llama decoder layers chained, on a symbolic 1-D mesh.

    Inputs: ``x: (s, hidden)``, ``cos``/``sin: (s, hidden // heads)``, then per layer ``i``
    the parameters ``l{i}_attn_norm, l{i}_wq, l{i}_wk, l{i}_wv, l{i}_wo, l{i}_mlp_norm,
    l{i}_w_gate, l{i}_w_up, l{i}_w_down`` (see :func:`layer_param_names`). The sequence
    length ``s`` is dynamic.
    """
    hd = _check(n_layers, hidden, heads, ffn)
    half = hd // 2
    H, F = hidden, ffn
    dims = {"H": H, "F": F}

    def t(*shape) -> str:
        inner = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        return f'R.Tensor(({inner}), dtype="float32")'

    params = [
        f'        x: R.Tensor(("s", {H}), dtype="float32"),',
        f'        cos: R.Tensor(("s", {hd}), dtype="float32"),',
        f'        sin: R.Tensor(("s", {hd}), dtype="float32"),',
    ]
    for i in range(n_layers):
        for name, shape, placement in _LAYER_PARAMS:
            sh = ", ".join(str(dims[d]) for d in shape) + ("," if len(shape) == 1 else "")
            params.append(f'        l{i}_{name}: R.DTensor(({sh}), "float32", "mesh[0]", "{placement}"),')

    body = [
        f"            cos_b: {t('s', 1, hd)} = R.expand_dims(cos, axis=[1])",
        f"            sin_b: {t('s', 1, hd)} = R.expand_dims(sin, axis=[1])",
        f'            neg: {t("s", "s")} = R.full(R.shape([s, s]), R.const(-1e9, "float32"), dtype="float32")',
        f"            mask: {t('s', 's')} = R.triu(neg, k=1)",
    ]
    scale = repr(1.0 / math.sqrt(hd))
    x = "x"
    for i in range(n_layers):
        p = f"l{i}_"
        sh = t("s", heads, hd)
        lines = [
            f"{p}hn: {t('s', H)} = R.nn.rms_norm({x}, {p}attn_norm, axes=[-1], epsilon=1e-5)",
            f"{p}q: {t('s', H)} = R.matmul({p}hn, {p}wq, out_dtype=None)",
            f"{p}k: {t('s', H)} = R.matmul({p}hn, {p}wk, out_dtype=None)",
            f"{p}v: {t('s', H)} = R.matmul({p}hn, {p}wv, out_dtype=None)",
        ]
        for n in ("q", "k", "v"):
            lines.append(f"{p}{n}_h: {sh} = R.reshape({p}{n}, R.shape([s, {heads}, {hd}]))")
        for n in ("q", "k"):
            a = f"{p}{n}"
            lines += [
                f"{a}_lo: {t('s', heads, half)} = R.strided_slice({a}_h, axes=[2], begin=[0], end=[{half}])",
                f"{a}_hi: {t('s', heads, half)} = R.strided_slice({a}_h, axes=[2], begin=[{half}], end=[{hd}])",
                f"{a}_hi_n: {t('s', heads, half)} = R.negative({a}_hi)",
                f"{a}_rot: {sh} = R.concat(({a}_hi_n, {a}_lo), axis=2)",
                f"{a}_cos: {sh} = R.multiply({a}_h, cos_b)",
                f"{a}_sin: {sh} = R.multiply({a}_rot, sin_b)",
                f"{a}_r: {sh} = R.add({a}_cos, {a}_sin)",
            ]
        lines += [
            f"{p}q_t: {t(heads, 's', hd)} = R.permute_dims({p}q_r, axes=[1, 0, 2])",
            f"{p}k_t: {t(heads, hd, 's')} = R.permute_dims({p}k_r, axes=[1, 2, 0])",
            f"{p}v_t: {t(heads, 's', hd)} = R.permute_dims({p}v_h, axes=[1, 0, 2])",
            f"{p}scores: {t(heads, 's', 's')} = R.matmul({p}q_t, {p}k_t, out_dtype=None)",
            f'{p}scaled: {t(heads, "s", "s")} = R.multiply({p}scores, R.const({scale}, "float32"))',
            f"{p}masked: {t(heads, 's', 's')} = R.add({p}scaled, mask)",
            f"{p}probs: {t(heads, 's', 's')} = R.nn.softmax({p}masked, axis=-1)",
            f"{p}ctx: {t(heads, 's', hd)} = R.matmul({p}probs, {p}v_t, out_dtype=None)",
            f"{p}ctx_t: {sh} = R.permute_dims({p}ctx, axes=[1, 0, 2])",
            f"{p}ctx_m: {t('s', H)} = R.reshape({p}ctx_t, R.shape([s, {H}]))",
            f"{p}attn: {t('s', H)} = R.matmul({p}ctx_m, {p}wo, out_dtype=None)",
            f"{p}h: {t('s', H)} = R.add({x}, {p}attn)",
            f"{p}mn: {t('s', H)} = R.nn.rms_norm({p}h, {p}mlp_norm, axes=[-1], epsilon=1e-5)",
            f"{p}gate: {t('s', F)} = R.matmul({p}mn, {p}w_gate, out_dtype=None)",
            f"{p}up: {t('s', F)} = R.matmul({p}mn, {p}w_up, out_dtype=None)",
            f"{p}act: {t('s', F)} = R.nn.silu({p}gate)",
            f"{p}gu: {t('s', F)} = R.multiply({p}act, {p}up)",
            f"{p}down: {t('s', H)} = R.matmul({p}gu, {p}w_down, out_dtype=None)",
            f"{p}y: {t('s', H)} = R.add({p}h, {p}down)",
        ]
        body += ["            " + line for line in lines]
        x = f"{p}y"

    header = (
        f"# {n_layers} Llama decoder layer(s) generated by distir.examples.llama_stack: hidden {H} = {heads} heads "
        f"of {hd}, FFN {F},\n# Megatron layouts from the parameter annotations only; sequence length s is dynamic.\n"
    )
    return (
        header
        + "@I.ir_module\nclass Module:\n"
        + '    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})\n\n'
        + "    @R.function\n    def main(\n"
        + "\n".join(params)
        + f'\n    ) -> R.Tensor(("s", {H}), dtype="float32"):\n'
        + "        s = T.int64()\n        with R.dataflow():\n"
        + "\n".join(body)
        + f"\n            R.output({x})\n        return {x}\n"
    )
