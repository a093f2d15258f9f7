"""Prefill and decode with an explicit KV cache, written with ``tvm.relax.frontend.nn``.

LLM serving runs the prompt once (prefill) and then one token at a time (decode), keeping every
layer's keys and values. Here the cache is plain tensors that the functions take and return, as
a TVM user writes it without MLC's paged cache: ``k_cache`` and ``v_cache`` of shape
``(layers, kv_heads, seq, head_dim)``, **laid out by heads** (heads before positions, as
MLC-LLM's cache pages are).

- ``prefill(ids, cos, sin)``: the prompt ``(s,)`` to ``(logits (s, vocab), k_cache, v_cache)``
  with ``s`` positions cached;
- ``decode(ids, cos, sin, k_cache, v_cache)``: one new token ``(1,)`` at position ``n`` (the
  rotary rows of that position), the caches of ``n`` positions, to ``(logits (1, vocab),
  k_cache, v_cache)`` of ``n + 1``: each layer appends the token's keys and values
  (``nn.op.concat`` on the position axis) and attends over all of them.

The layers are :mod:`distir.examples.nn.gqa`'s (``num_kv_heads`` may be below ``num_heads``; the
default here has one key/value head per query head). :data:`TP_PLAN` cuts every projection by
heads and the caches by heads, ``S[1]``: every worker keeps and extends the cache of its own
heads, so the cache itself never moves; the collectives are those of the layers (one
all-reduce per attention block and per MLP, one for the embedding). It is laid out once for
every count (``num_workers`` symbolic): the default's 12 heads divide every count from 1 to 4;
at a count that does not divide the heads, whole heads are re-blocked (``R.ccl.regroup``),
exactly. See docs/frontend.md.
"""

from __future__ import annotations

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from . import gqa as nn_gqa
from .gqa import GQAAttention, GQAConfig, rope_tables
from .llama import DecoderLayer, _rotate

__all__ = ["TP_PLAN", "DecodeConfig", "DecoderLM", "random_weights", "rope_tables", "spec"]


def DecodeConfig(**sizes) -> GQAConfig:  # noqa: N802 - a config constructor, like the other models'
    """The model's sizes: 12 heads of 8 (hidden 96; every count from 1 to 4 divides the heads), as many
    key/value heads, FFN 128, 2 layers, vocabulary 251."""
    defaults = {"hidden_size": 96, "num_heads": 12, "num_kv_heads": 12, "intermediate_size": 128}
    return GQAConfig(**{**defaults, **sizes})


class CachedAttention(GQAAttention):
    """Grouped-query attention that also returns the keys and values it computed, by heads."""

    def forward(self, x, cos, sin, past=None):
        """x ``(s, hidden)``; past: the layer's cached ``(k, v)``, each ``(kv_heads, n, head_dim)``, or None
        (a prompt: causal attention over itself). Returns the output and the new cache ``(kv_heads, n + s, head_dim)``."""
        c = self.config
        s, d = x.shape[0], c.head_dim
        q = _rotate(op.reshape(self.q_proj(x), (s, c.num_heads, d)), cos, sin)
        k = op.permute_dims(_rotate(op.reshape(self.k_proj(x), (s, c.num_kv_heads, d)), cos, sin), [1, 0, 2])
        v = op.permute_dims(op.reshape(self.v_proj(x), (s, c.num_kv_heads, d)), [1, 0, 2])
        if past is not None:  # append this token's keys and values to the cache
            k, v = op.concat([past[0], k], dim=1), op.concat([past[1], v], dim=1)
        keys, values = (op.repeat(t, c.group, axis=0) for t in (k, v))  # (heads, positions, head_dim)
        if past is None:  # a prompt: causal attention over itself
            out = op.scaled_dot_product_attention(
                op.unsqueeze(q, 0), *(op.unsqueeze(op.permute_dims(t, [1, 0, 2]), 0) for t in (keys, values)),
                is_causal=True,
            )
        else:  # one new token attends to every cached position; written out, since TVM 0.27 cannot build
            # nn.attention with a key length n + 1 (its legalization asserts the lengths are one variable)
            scores = op.matmul(op.permute_dims(q, [1, 0, 2]), op.permute_dims(keys, [0, 2, 1]))
            probs = op.softmax(scores * (1.0 / float(np.sqrt(d))), axis=-1)  # (heads, 1, n + 1)
            out = op.permute_dims(op.matmul(probs, values), [1, 0, 2])  # (1, heads, head_dim)
        return self.o_proj(op.reshape(out, (s, c.num_heads * d))), (k, v)


class CachedLayer(DecoderLayer):
    def __init__(self, config: GQAConfig):
        super().__init__(config, CachedAttention)

    def forward(self, x, cos, sin, past=None):
        a, cache = self.self_attn(self.input_layernorm(x), cos, sin, past)
        h = x + a
        return h + self.mlp(self.post_attention_layernorm(h)), cache


class DecoderLM(nn.Module):
    """Embedding, layers with a KV cache, final norm, LM head; ``prefill`` and ``decode`` (module docstring)."""

    def __init__(self, config: GQAConfig | None = None):
        config = config or DecodeConfig()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([CachedLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.RMSNorm(config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def _run(self, ids, cos, sin, pasts):
        x = self.embed_tokens(ids)
        ks, vs = [], []
        for layer, past in zip(self.layers, pasts):
            x, (k, v) = layer(x, cos, sin, past)
            ks.append(op.unsqueeze(k, 0))
            vs.append(op.unsqueeze(v, 0))
        return self.lm_head(self.norm(x)), op.concat(ks, dim=0), op.concat(vs, dim=0)

    def prefill(self, ids, cos, sin):
        return self._run(ids, cos, sin, [None] * len(self.layers))

    def decode(self, ids, cos, sin, k_cache, v_cache):
        n_layers = len(self.layers)
        ks = op.split(k_cache, n_layers, axis=0) if n_layers > 1 else [k_cache]
        vs = op.split(v_cache, n_layers, axis=0) if n_layers > 1 else [v_cache]
        pasts = [(op.squeeze(k, 0), op.squeeze(v, 0)) for k, v in zip(ks, vs)]
        return self._run(ids, cos, sin, pasts)


def spec(config: GQAConfig | None = None) -> dict:
    """``export_tvm``'s spec of both methods: prompt length ``s``, cached length ``n``."""
    c = config or DecodeConfig()
    d = c.head_dim
    cache = nn.spec.Tensor([c.num_layers, c.num_kv_heads, "n", d], "float32")
    return {
        "prefill": {"ids": nn.spec.Tensor(["s"], "int32"), "cos": nn.spec.Tensor(["s", d], "float32"),
                    "sin": nn.spec.Tensor(["s", d], "float32")},
        "decode": {"ids": nn.spec.Tensor([1], "int32"), "cos": nn.spec.Tensor([1, d], "float32"),
                   "sin": nn.spec.Tensor([1, d], "float32"), "k_cache": cache, "v_cache": cache},
    }


TP_PLAN: dict[str, str] = {
    **nn_gqa.tp_plan(GQAConfig(), 1),  # every projection cut by heads (the key/value ones too)
    "k_cache": "S[1]",  # by heads: each worker keeps and extends the cache of its own heads
    "v_cache": "S[1]",
}


def random_weights(model: DecoderLM, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by name (as :func:`distir.examples.nn.gqa.random_weights`)."""
    return nn_gqa.random_weights(model, seed)
