"""The strategies of one op: the input layouts its sharding rule accepts and the output layouts
they give (the solver chooses one per op)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...errors import DistirError, TypeInferenceError
from ...ir.placement import Partial, Placement, Replicate
from ...ir.sharding import forward
from .cost_model import CostModel
from .sharding_graph import Site

__all__ = ["Strategy", "site_strategies"]


@dataclass(frozen=True)
class Strategy:
    """One way to run an op: its inputs' placements and the outputs' placements they give."""

    ins: tuple[Placement, ...]
    outs: tuple[Placement, ...]


def site_strategies(site: Site, cost: CostModel, partial_ops: list[set[str]], keep=None) -> list[Strategy]:
    """Every strategy of ``site`` its rule accepts, per mesh axis: all replicated; each factor of
    an input dim sharded in every input holding it; partial inputs passed through where the op is
    linear (only for inputs that may come partial: ``partial_ops[k]``); along an axis of
    :meth:`CostModel.replicated_axes`, only the all-replicated one. ``keep(slot, placement)``
    says a layout that does not :meth:`CostModel.fits` is allowed anyway (a given layout)."""
    rule = site.rule
    n, ndim = len(site.ins), site.mesh.ndim
    replicated = Replicate()
    options: list[tuple] = [(replicated,) * n]
    for f, q in site.cuts():
        if f in rule.blocked:
            continue
        opt = tuple(site.input_spec(k, f, q) for k in range(n))
        if opt not in options:
            options.append(opt)
    for op, mode in rule.partial.items():
        can = [k for k in range(n) if op in partial_ops[k]]
        if mode == "all":
            if n and len(can) == n:
                options.append((Partial(op),) * n)
        else:
            for k in can:
                if rule.partial_inputs is None or k in rule.partial_inputs:
                    options.append(tuple(Partial(op) if i == k else replicated for i in range(n)))
    replicated_axes = cost.replicated_axes(site.mesh)
    per_axis = [options[:1] if a in replicated_axes else options for a in range(ndim)]
    out: list[Strategy] = []
    seen = set()
    for combo in itertools.product(*per_axis):
        placements = tuple(cost.one(Placement(tuple(combo[a][k] for a in range(ndim)))) for k in range(n))
        try:
            for s, p in zip(site.ins, placements):
                p.validate(ndim, s.tensor.ndim)
            outs = tuple(cost.one(p) for p in forward(rule, placements, ndim, site.op.name))
        except (TypeInferenceError, DistirError):
            continue
        if not all(cost.fits(s, p, site.mesh) or (keep is not None and keep(s, p)) for s, p in zip(site.ins, placements)):
            continue
        if not all(cost.fits(s, p, site.mesh) or (keep is not None and keep(s, p)) for s, p in zip(site.outs, outs)):
            continue
        key = (placements, outs)
        if key not in seen:
            seen.add(key)
            out.append(Strategy(placements, outs))
    return out
