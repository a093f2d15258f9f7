"""Canonicalize: remove redistributes that change nothing, then bindings nobody uses.

Every distir op is pure, so a binding whose var is not used (directly or through other
live bindings) by the function result can go. Passes that insert redistributes
(propagation, legalization) can emit ``R.dist.redistribute(x, mesh, p)`` where ``x`` is
already laid out as ``p`` on ``mesh``; those become ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.expr import Binding, Call, Function, IRModule, leaf_vars
from ..ir.types import DTensorType
from .pass_infra import FunctionPass, PassContext, register_pass
from .rewrite import Env, map_bindings

__all__ = ["Canonicalize", "remove_dead_bindings", "remove_trivial_redistributes"]


def _is_trivial_redistribute(value: object) -> bool:
    if not isinstance(value, Call) or value.op.name != "dist.redistribute":
        return False
    x = value.args[0]
    t = x.type
    attrs = value.attrs
    return (
        isinstance(t, DTensorType)
        and "device_mesh" in attrs
        and "placement" in attrs
        and t.mesh == attrs["device_mesh"]
        and t.placement == attrs["placement"]
    )


def remove_trivial_redistributes(func: Function) -> Function:
    """Uses of ``redistribute(x, mesh, p)`` become ``x`` when x is already ``p`` on ``mesh``."""

    def fn(b: Binding, env: Env) -> list[Binding] | None:
        if _is_trivial_redistribute(b.value):
            env[b.var] = b.value.args[0]  # type: ignore[union-attr]
            return []
        return None

    return map_bindings(func, fn)


def remove_dead_bindings(func: Function) -> Function:
    """Drop bindings whose vars the result does not depend on (all ops are pure)."""
    live = set(leaf_vars(func.result))
    for block in reversed(func.blocks):
        for b in reversed(block.bindings):
            if b.var in live:
                live.update(leaf_vars(b.value))
    return map_bindings(func, lambda b, env: None if b.var in live else [])


@register_pass
@dataclass(frozen=True)
class Canonicalize(FunctionPass):
    """Remove trivial redistributes and dead bindings."""

    name: ClassVar[str] = "canonicalize"
    opt_level: ClassVar[int] = 1

    remove_trivial_redistribute: bool = True
    remove_dead_code: bool = True

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if self.remove_trivial_redistribute:
            func = remove_trivial_redistributes(func)
        if self.remove_dead_code:
            func = remove_dead_bindings(func)
        return func
