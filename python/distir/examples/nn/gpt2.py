"""GPT-2 written with ``tvm.relax.frontend.nn`` as a TVM user writes it, and its tensor-parallel plan.

Plain TVM: :class:`GPT2` exports, builds and runs on one device without distir. Its parts and
weight names follow Hugging Face's ``GPT2LMHeadModel`` (``wte``, ``wpe``, ``h.0.attn.c_attn``...),
its weights stored as ``nn.Linear`` stores them, ``(out, in)``:

- positions made in the model with ``nn.op.arange`` and looked up in ``wpe``;
- per block: LayerNorm, attention with one fused QKV projection **with bias** in Hugging Face's
  order (all queries, then all keys, then all values: ``c_attn``), ``nn.op.scaled_dot_product_attention``
  (causal), the output projection ``c_proj``; LayerNorm, an MLP with GELU (tanh); residuals;
- a final LayerNorm and the LM head **tied** to the token embedding (``matmul`` with ``wte``).

:data:`TP_PLAN` shards it Megatron-style on a 1-D mesh. The fused weight's rows are three parts
(q, k, v), each cut into blocks of heads: the strided shard ``S[0/3]`` (docs/strided.md), bias
alike, so that every worker computes whole heads of q, k and v without communication. The tied
embedding is cut by vocabulary: the lookup leaves partial sums (one all-reduce), the head gives
logits cut by vocabulary. See docs/frontend.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = ["BLOCK_COLWISE_PLAN", "GPT2", "TP_PLAN", "GPT2Config", "block_module", "random_weights", "spec"]


@dataclass(frozen=True)
class GPT2Config:
    """Sizes: 4 heads of 16 (hidden 64); a vocabulary of 251 (a prime: no count from 2 to 4 divides it)."""

    vocab_size: int = 251
    n_positions: int = 32
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    layer_norm_epsilon: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} must be a multiple of n_head {self.n_head}")


class GPT2Attention(nn.Module):
    def __init__(self, config: GPT2Config):
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=True)  # rows: all q, all k, all v
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=True)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        b, s, c = x.shape
        qkv = op.reshape(self.c_attn(x), (b, s, 3, self.n_head, self.head_dim))
        q, k, v = (op.reshape(t, (b, s, self.n_head, self.head_dim)) for t in op.split(qkv, 3, axis=2))
        out = op.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, s, heads, head_dim)
        return self.c_proj(op.reshape(out, (b, s, c)))


class GPT2MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=True)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=True)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.c_proj(op.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, config: GPT2Config):
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """``forward(ids)``: token ids ``(b, s)`` to logits ``(b, s, vocab_size)``."""

    def __init__(self, config: GPT2Config | None = None):
        config = config or GPT2Config()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, ids: nn.Tensor) -> nn.Tensor:
        positions = op.arange(0, ids.shape[1], dtype="int32")
        x = self.wte(ids) + self.wpe(positions)  # (b, s, c) + (s, c)
        for block in self.h:
            x = block(x)
        return op.matmul(self.ln_f(x), op.permute_dims(self.wte.weight))  # the head tied to wte


def spec(config: GPT2Config | None = None) -> dict:
    """``export_tvm``'s spec of :meth:`GPT2.forward`: one sequence of dynamic length ``s``."""
    return {"forward": {"ids": nn.spec.Tensor([1, "s"], "int32")}}


TP_PLAN: dict[str, str] = {
    "wte.weight": "S[0]",  # vocabulary: a partial lookup, logits cut by vocabulary (tied head)
    "h.*.attn.c_attn.weight": "S[0/3]",  # q, k and v rows, each in blocks of heads
    "h.*.attn.c_attn.bias": "S[0/3]",
    "h.*.attn.c_proj.weight": "S[1]",  # one all-reduce per attention block
    "h.*.mlp.c_fc.weight": "S[0]",
    "h.*.mlp.c_fc.bias": "S[0]",
    "h.*.mlp.c_proj.weight": "S[1]",  # one all-reduce per MLP
}


def random_weights(model: GPT2, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by name: LayerNorm scales near 1 and shifts near 0, biases small, the rest
    scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in model.state_dict().items():
        shape = tuple(int(x) for x in p.shape)
        if ".ln_" in name or name.startswith("ln_"):
            a = (1.0 if name.endswith("weight") else 0.0) + 0.1 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            a = 0.1 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = a.astype(p.dtype)
    return out


class _BlockAttention(nn.Module):
    """Attention with q, k and v cut off the fused projection by ``op.split`` (``form="split"``) or
    after reshaping it to ``(b, s, 3, heads, head_dim)`` (``form="reshape"``), a causal mask added."""

    def __init__(self, config: GPT2Config, form: str):
        self.n_head, self.head_dim, self.form = config.n_head, config.head_dim, form
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=True)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=True)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        b, s, c = x.shape
        shape = (b, s, self.n_head, self.head_dim)
        if self.form == "split":
            q, k, v = (op.reshape(t, shape) for t in op.split(self.c_attn(x), 3, axis=2))
        else:
            qkv = op.reshape(self.c_attn(x), (b, s, 3, self.n_head, self.head_dim))
            q, k, v = (op.reshape(t, shape) for t in op.split(qkv, 3, axis=2))
        q, k, v = op.permute_dims(q, [0, 2, 1, 3]), op.permute_dims(k, [0, 2, 3, 1]), op.permute_dims(v, [0, 2, 1, 3])
        scores = op.matmul(q, k) * (1.0 / float(self.head_dim) ** 0.5)
        mask = op.triu(op.full((s, s), -1e9, dtype="float32"), diagonal=1)
        ctx = op.permute_dims(op.matmul(op.softmax(scores + mask, axis=-1), v), [0, 2, 1, 3])
        return self.c_proj(op.reshape(ctx, (b, s, c)))


class _Block(nn.Module):
    def __init__(self, config: GPT2Config, form: str):
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd), _BlockAttention(config, form)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd), GPT2MLP(config)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _Blocks(nn.Module):
    def __init__(self, config: GPT2Config, form: str):
        self.h = nn.ModuleList([_Block(config, form) for _ in range(config.n_layer)])

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        for block in self.h:
            x = block(x)
        return x


def block_module(form: str = "split", config: GPT2Config | None = None):
    """``config.n_layer`` GPT-2 blocks alone (no embeddings, no head; input ``(b, s, n_embd)``), q, k and
    v cut by ``split`` or ``reshape``, imported into distir without a layout (``@forward``): the block
    the layout benchmarks and tests measure (scripts/bench_strided_qkv.py, docs/strided.md)."""
    from ...tvm import from_nn

    config = config or GPT2Config(n_layer=1)
    return from_nn(_Blocks(config, form), {"forward": {"x": nn.spec.Tensor(["b", "s", config.n_embd], "float32")}})


# the blocks' Megatron plan with a plain (colwise) fused QKV; TP_PLAN's strided c_attn is the alternative
BLOCK_COLWISE_PLAN: dict[str, str] = {
    "h.*.attn.c_attn.weight": "S[0]", "h.*.attn.c_attn.bias": "S[0]", "h.*.attn.c_proj.weight": "S[1]",
    "h.*.mlp.c_fc.weight": "S[0]", "h.*.mlp.c_fc.bias": "S[0]", "h.*.mlp.c_proj.weight": "S[1]",
}
