"""A small Llama-style decoder written with ``tvm.relax.frontend.nn``, and its tensor-parallel plan.

The model is plain TVM: ``Llama(LlamaConfig())`` is an ``nn.Module`` that TVM exports,
builds and runs on one device without distir. distir imports it with
:func:`distir.tvm.from_nn`, lays its weights out by :data:`TP_PLAN` (placements) or
:data:`TP_PLAN_STRATEGIES` (the same plan in named strategies) with ``ShardParams``, and
distributes it once for every device count. See docs/frontend.md.

``forward(ids, cos, sin)`` takes token ids ``(s,)`` and the rotary tables ``(s, head_dim)``
(:func:`rope_tables`) and returns the logits ``(s, vocab_size)``:

- ``embed_tokens``: ``nn.Embedding`` (vocabulary-parallel in the plan: each worker holds
  ``ceil(vocab / num_workers)`` rows, the lookup is a partial sum, one all-reduce);
- per layer: RMSNorm, attention with one fused QKV projection (``nn.Linear(hidden, 3 *
  hidden)``), rotary embedding, causal softmax, output projection; RMSNorm, SwiGLU MLP
  (``gate_proj``, ``up_proj``, ``down_proj``); a residual around each;
- a final RMSNorm and the LM head (``nn.Linear(hidden, vocab)``, vocabulary-parallel: the
  logits come out sharded by vocabulary).

The fused QKV weight is laid out head by head: rows ``[q_h; k_h; v_h]`` of each head ``h``
follow each other (GPT-NeoX's ``query_key_value`` layout), so its output reshapes to
``(s, heads, 3 * head_dim)`` and splits into q, k, v on the last axis. Cutting the rows
into blocks (``S[0]``, "colwise") then gives each worker whole heads with their q, k and v,
and attention runs without communication. A Q-then-K-then-V fused weight (Hugging Face,
MLC-LLM) is not that: a block of its rows holds some heads' queries and other heads' keys,
and no placement of the weight alone can express the per-head cut (MLC reorders the rows
when it shards). Such a checkpoint converts to this layout by reordering rows:
``w.reshape(3, heads, head_dim, hidden).transpose(1, 0, 2, 3).reshape(3 * hidden, hidden)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = [
    "TP_PLAN",
    "TP_PLAN_STRATEGIES",
    "Llama",
    "LlamaConfig",
    "random_weights",
    "rope_tables",
    "spec",
]


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of the model. The defaults: 12 heads (every count from 1 to 4 divides them) and a
    vocabulary of 250 (which 3 and 4 do not divide: the embedding and the LM head are cut unevenly)."""

    vocab_size: int = 250
    hidden_size: int = 96
    num_heads: int = 12
    intermediate_size: int = 192
    num_layers: int = 2
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.head_dim % 2:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be num_heads {self.num_heads} times an even head_dim"
            )


def _rotate(x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
    """Rotary embedding of ``x`` (s, heads, head_dim): x * cos + rotate_half(x) * sin."""
    lo, hi = op.split(x, 2, axis=2)
    rotated = op.concat([op.negative(hi), lo], dim=2)
    return x * op.unsqueeze(cos, 1) + rotated * op.unsqueeze(sin, 1)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.hidden_size = config.hidden_size
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
        s = x.shape[0]
        h, d = self.num_heads, self.head_dim
        qkv = op.reshape(self.qkv_proj(x), (s, h, 3 * d))  # per head: [q; k; v]
        q, k, v = op.split(qkv, 3, axis=2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        q = op.permute_dims(q, [1, 0, 2])  # (h, s, d)
        kt = op.permute_dims(k, [1, 2, 0])  # (h, d, s)
        v = op.permute_dims(v, [1, 0, 2])
        scores = op.matmul(q, kt) * (1.0 / float(np.sqrt(d)))
        mask = op.triu(op.full((s, s), -1e9, dtype="float32"), diagonal=1)  # causal
        probs = op.softmax(scores + mask, axis=-1)
        ctx = op.permute_dims(op.matmul(probs, v), [1, 0, 2])  # (s, h, d)
        return self.o_proj(op.reshape(ctx, (s, self.hidden_size)))


class MLP(nn.Module):
    def __init__(self, config: LlamaConfig):
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.down_proj(op.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, attention: type[nn.Module] = Attention):
        self.input_layernorm = nn.RMSNorm(config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False)
        self.self_attn = attention(config)
        self.post_attention_layernorm = nn.RMSNorm(
            config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False
        )
        self.mlp = MLP(config)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    """Embedding, ``num_layers`` decoder layers, final norm, LM head (see the module docstring);
    ``attention`` is the layers' attention module (:mod:`distir.examples.nn.gqa` gives its own)."""

    def __init__(self, config: LlamaConfig | None = None, attention: type[nn.Module] = Attention):
        config = config or LlamaConfig()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(config, attention) for _ in range(config.num_layers)])
        self.norm = nn.RMSNorm(config.hidden_size, axes=-1, epsilon=config.rms_norm_eps, bias=False)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, ids: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def spec(config: LlamaConfig | None = None) -> dict:
    """``export_tvm``'s spec of :meth:`Llama.forward`: a dynamic sequence length ``s``."""
    config = config or LlamaConfig()
    d = config.head_dim
    return {
        "forward": {
            "ids": nn.spec.Tensor(["s"], "int32"),
            "cos": nn.spec.Tensor(["s", d], "float32"),
            "sin": nn.spec.Tensor(["s", d], "float32"),
        }
    }


# Megatron-style tensor parallelism on a 1-D mesh, written with placements. An nn.Linear
# weight is stored (out, in): cutting its rows (S[0]) is column parallel, its columns (S[1])
# row parallel. The norms' weights are not named: propagation replicates them.
TP_PLAN: dict[str, str] = {
    "embed_tokens.weight": "S[0]",  # vocabulary rows
    "layers.*.self_attn.qkv_proj.weight": "S[0]",  # whole heads (rows are per-head [q; k; v])
    "layers.*.self_attn.o_proj.weight": "S[1]",  # one all-reduce per attention block
    "layers.*.mlp.gate_proj.weight": "S[0]",
    "layers.*.mlp.up_proj.weight": "S[0]",
    "layers.*.mlp.down_proj.weight": "S[1]",  # one all-reduce per MLP
    "lm_head.weight": "S[0]",  # logits sharded by vocabulary
}

# The same plan in named strategies (as PyTorch DTensor's ColwiseParallel / RowwiseParallel).
TP_PLAN_STRATEGIES: dict[str, str] = {
    "embed_tokens.weight": "vocab",
    "*.qkv_proj.weight": "colwise",
    "*.o_proj.weight": "rowwise",
    "*.gate_proj.weight": "colwise",
    "*.up_proj.weight": "colwise",
    "*.down_proj.weight": "rowwise",
    "lm_head.weight": "vocab",
}


def random_weights(model: Llama, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights of ``model`` by name (norm weights near 1, the rest scaled by 1/sqrt(fan-in))."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in model.state_dict().items():
        shape = tuple(int(x) for x in p.shape)
        if name.endswith("layernorm.weight") or name == "norm.weight":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = a.astype(p.dtype)
    return out


def rope_tables(seq_len: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of the rotary embedding, ``(seq_len, head_dim)`` float32 each (halves repeated)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq_len, dtype=np.float64), inv)
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype("float32"), np.sin(angles).astype("float32")
