"""A Llama with grouped-query attention written with ``tvm.relax.frontend.nn``, and its plans.

Plain TVM, as :mod:`distir.examples.nn.llama` but with fewer key/value heads than query heads
(``num_kv_heads`` divides ``num_heads``; each key/value head serves ``num_heads / num_kv_heads``
query heads): separate ``q_proj``, ``k_proj``, ``v_proj`` (``nn.Linear``, Hugging Face's
names), rotary embedding on q and k, the key and value heads repeated with
``nn.op.repeat`` to one per query head, then ``nn.op.scaled_dot_product_attention`` (causal).

:func:`tp_plan` is MLC-LLM's rule for a count of workers: the query heads are always cut; the
key/value projections are cut by heads when the count divides ``num_kv_heads`` (each worker
repeats its own key/value heads for its own query heads: no communication), and replicated
when it does not (every worker projects every key/value head, repeats them, and keeps the
heads of its query heads: still no communication, at the cost of the replicated weights).
Both are exact at every count. See docs/frontend.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from .llama import Llama, _rotate, rope_tables

__all__ = ["GQALlama", "GQAConfig", "kv_heads_cut", "random_weights", "rope_tables", "spec", "tp_plan"]


@dataclass(frozen=True)
class GQAConfig:
    """Sizes: 8 query heads and 2 key/value heads of 8 (hidden 64); a vocabulary of 251 (prime)."""

    vocab_size: int = 251
    hidden_size: int = 64
    num_heads: int = 8
    num_kv_heads: int = 2
    intermediate_size: int = 128
    num_layers: int = 2
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.head_dim % 2 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be num_heads {self.num_heads} times an even head_dim, and "
                f"num_kv_heads {self.num_kv_heads} must divide num_heads"
            )


class GQAAttention(nn.Module):
    def __init__(self, config: GQAConfig):
        self.config = config
        d = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(config.num_heads * d, config.hidden_size, bias=False)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
        c = self.config
        s, d = x.shape[0], c.head_dim
        q = _rotate(op.reshape(self.q_proj(x), (s, c.num_heads, d)), cos, sin)
        k = _rotate(op.reshape(self.k_proj(x), (s, c.num_kv_heads, d)), cos, sin)
        v = op.reshape(self.v_proj(x), (s, c.num_kv_heads, d))
        k, v = op.repeat(k, c.group, axis=1), op.repeat(v, c.group, axis=1)  # one key/value head per query head
        q, k, v = (op.unsqueeze(t, 0) for t in (q, k, v))  # (1, s, heads, head_dim)
        out = op.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(op.reshape(out, (s, c.num_heads * d)))


class GQALlama(Llama):
    """:class:`distir.examples.nn.llama.Llama` with :class:`GQAAttention`: ``forward(ids, cos, sin)``, token ids
    ``(s,)`` and rotary tables ``(s, head_dim)`` to logits."""

    def __init__(self, config: GQAConfig | None = None):
        super().__init__(config or GQAConfig(), GQAAttention)


def spec(config: GQAConfig | None = None) -> dict:
    """``export_tvm``'s spec of :meth:`GQALlama.forward`: a dynamic sequence length ``s``."""
    d = (config or GQAConfig()).head_dim
    return {"forward": {"ids": nn.spec.Tensor(["s"], "int32"), "cos": nn.spec.Tensor(["s", d], "float32"),
                        "sin": nn.spec.Tensor(["s", d], "float32")}}


def kv_heads_cut(config: GQAConfig, num_workers: int) -> bool:
    """MLC-LLM's rule: the key/value heads are cut when the count divides them, else replicated."""
    return config.num_kv_heads % num_workers == 0


def tp_plan(config: GQAConfig, num_workers: int) -> dict[str, str]:
    """The tensor-parallel plan for ``num_workers`` (strategies; module docstring)."""
    kv = "colwise" if kv_heads_cut(config, num_workers) else "replicate"
    return {
        "embed_tokens.weight": "vocab",
        "*.q_proj.weight": "colwise",
        "*.k_proj.weight": kv,
        "*.v_proj.weight": kv,
        "*.o_proj.weight": "rowwise",
        "*.gate_proj.weight": "colwise",
        "*.up_proj.weight": "colwise",
        "*.down_proj.weight": "rowwise",
        "lm_head.weight": "vocab",
    }


def random_weights(model: GQALlama, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by name (norm weights near 1, the rest scaled by 1/sqrt(fan-in))."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in model.state_dict().items():
        shape = tuple(int(x) for x in p.shape)
        a = 1.0 + 0.1 * rng.standard_normal(shape) if name.endswith("norm.weight") else \
            rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = a.astype(p.dtype)
    return out


def mesh(num_workers: int):
    """The 1-D mesh of ``num_workers`` devices to lay out the plan of a count that cuts the key/value heads
    (``ShardParams(tp_plan(config, n), mesh=mesh(n))``): on a static mesh propagation sees that the count
    divides them (on a symbolic one it weighs counts that do not, and gathers them). The replicated plan
    is the same at every count that does not divide them: laid out once, ``num_workers`` symbolic."""
    from ...ir import DeviceMesh
    from ...ir.mesh import Range

    return DeviceMesh((num_workers,), Range(0, num_workers))
