"""A mixture-of-experts layer written with ``tvm.relax.frontend.nn``, and its two plans.

Plain TVM: ``forward(x)`` takes tokens ``(t, hidden)`` and returns ``(t, hidden)``:

- the router (``gate``, an ``nn.Linear`` to one logit per expert), ``softmax``, ``topk`` (the
  ``top_k`` experts of each token, their weights renormalised to sum to 1, as Mixtral does);
- the routing matrix ``(t, experts)``: each token's weight for each expert, 0 for the experts it
  did not pick (``equal`` of the top-k indices with ``arange(experts)``, summed over the k picks);
- the experts, stacked weights ``w_up (experts, ffn, hidden)`` and ``w_down (experts, hidden, ffn)``,
  a SiLU MLP each; every expert runs on every token (a batched ``matmul``) and the outputs are
  summed with the routing weights. (MLC-LLM gathers each expert's tokens with TIR kernels, which
  distir cannot read; this dense form is exact and uses ``nn.op`` only.)

Two plans, both exact at every count:

- :data:`EP_PLAN`, expert parallelism: the experts are cut over the workers (``S[0]`` on both
  stacks); each worker runs its experts on every token and keeps its columns of the routing
  matrix (a local slice, no communication); the weighted sum over experts is a partial sum,
  all-reduced once.
- :data:`TP_PLAN`, tensor parallelism inside the experts: every worker holds every expert, cut
  along the FFN dim (``w_up`` by rows, ``w_down`` by columns, as a Megatron MLP); the down
  projection leaves partial sums, all-reduced once.

Expert parallelism pays off when the experts outweigh the tokens: :data:`SIZE_HINTS` tells
propagation how many tokens a call routes. See docs/frontend.md for the bytes each sends and holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = ["EP_PLAN", "SIZE_HINTS", "TP_PLAN", "MoE", "MoEConfig", "random_weights", "spec"]


@dataclass(frozen=True)
class MoEConfig:
    """Sizes: 4 experts, each token routed to 2; hidden 64, FFN 128 per expert."""

    hidden_size: int = 64
    num_experts: int = 4
    top_k: int = 2
    ffn_size: int = 128

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"top_k {self.top_k} must be between 1 and num_experts {self.num_experts}")


class MoE(nn.Module):
    """Router, top-k, experts (module docstring)."""

    def __init__(self, config: MoEConfig | None = None):
        config = config or MoEConfig()
        self.config = config
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.w_up = nn.Parameter((config.num_experts, config.ffn_size, config.hidden_size), "float32")
        self.w_down = nn.Parameter((config.num_experts, config.hidden_size, config.ffn_size), "float32")

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        c = self.config
        probs = op.softmax(self.gate(x), axis=-1)  # (t, experts)
        weight, expert = op.topk(probs, c.top_k, axis=-1)  # (t, k) each
        weight = weight / op.sum(weight, axis=-1, keepdims=True)
        picked = op.equal(op.unsqueeze(expert, 2), op.arange(0, c.num_experts, dtype="int32"))  # (t, k, experts)
        route = op.sum(op.astype(picked, "float32") * op.unsqueeze(weight, 2), axis=1)  # (t, experts)
        h = op.silu(op.matmul(op.unsqueeze(x, 0), op.permute_dims(self.w_up, [0, 2, 1])))  # (experts, t, ffn)
        y = op.matmul(h, op.permute_dims(self.w_down, [0, 2, 1]))  # (experts, t, hidden)
        return op.sum(y * op.unsqueeze(op.permute_dims(route), 2), axis=0)  # (t, hidden)


def spec(config: MoEConfig | None = None) -> dict:
    """``export_tvm``'s spec of :meth:`MoE.forward`: a dynamic number of tokens ``t``."""
    return {"forward": {"x": nn.spec.Tensor(["t", (config or MoEConfig()).hidden_size], "float32")}}


EP_PLAN: dict[str, str] = {"w_up": "S[0]", "w_down": "S[0]"}  # experts over the workers

# How many tokens a call routes, for propagation's cost model (``PassContext(config={
# "propagate-sharding.size_hints": SIZE_HINTS})``). Without it the layouts are weighed up to 4096
# tokens, where all-reducing the (tokens, hidden) output moves more bytes than gathering these
# small experts, so propagation gathers them rather than keep EP_PLAN's cut.
SIZE_HINTS: dict[str, int] = {"t": 64}
TP_PLAN: dict[str, str] = {"w_up": "S[1]", "w_down": "S[2]"}  # every expert, cut along its FFN dim


def random_weights(model: MoE, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by name, scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    return {
        name: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(p.dtype)
        for name, p in model.state_dict().items()
        for shape in [tuple(int(x) for x in p.shape)]
    }
