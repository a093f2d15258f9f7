"""Small helpers for passes that rewrite bindings one at a time.

:func:`map_bindings` walks a function's bindings in order and lets a callback replace each
one with zero or more bindings, while a substitution map (``env``: old Var -> new Expr) is
applied to every later use: binding values, dataflow block outputs and the function result.
Removing a binding and redirecting its uses to another value is ``env[b.var] = x; return []``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..ir.expr import Binding, Block, Call, Expr, Function, Tuple, TupleGetItem, Var

__all__ = ["BindingFn", "Env", "map_bindings", "substitute_expr"]

Env = dict[Var, Expr]
# fn(binding, env) -> None (keep the binding as is) or the list of bindings that replace it.
BindingFn = Callable[[Binding, Env], "list[Binding] | None"]


def _resolve(v: Var, env: Mapping[Var, Expr]) -> Expr:
    seen = 0
    out: Expr = v
    while isinstance(out, Var) and out in env and seen <= len(env):
        nxt = env[out]
        if nxt is out:
            break
        out = nxt
        seen += 1
    return out


def substitute_expr(expr: Expr, env: Mapping[Var, Expr]) -> Expr:
    """``expr`` with every Var in ``env`` replaced; the same object when nothing changes."""
    if not env:
        return expr
    if isinstance(expr, Var):
        return _resolve(expr, env)
    if isinstance(expr, Call):
        args = tuple(substitute_expr(a, env) for a in expr.args)
        if all(a is b for a, b in zip(args, expr.args)):
            return expr
        return Call(expr.op, args, expr.attrs, expr.span)
    if isinstance(expr, Tuple):
        fields = tuple(substitute_expr(f, env) for f in expr.fields)
        if all(a is b for a, b in zip(fields, expr.fields)):
            return expr
        return Tuple(fields, expr.span)
    if isinstance(expr, TupleGetItem):
        inner = substitute_expr(expr.tuple_value, env)
        return expr if inner is expr.tuple_value else TupleGetItem(inner, expr.index, expr.span)
    return expr


def map_bindings(func: Function, fn: BindingFn, env: Env | None = None) -> Function:
    """Rewrite ``func`` binding by binding (see the module docstring).

    Each binding's value has the substitutions so far applied before ``fn`` sees it. ``fn``
    may add entries to ``env`` to redirect uses of vars it removes or replaces. Dataflow
    block outputs follow the substitution: an output redirected to a var of the same block
    stays listed, one redirected elsewhere (a parameter, an earlier block) or whose binding
    was removed is dropped. Blocks left empty are dropped. Returns ``func`` itself when
    nothing changed, so passes can detect "no change" by identity.
    """
    env = {} if env is None else env
    changed = False
    blocks: list[Block] = []
    for block in func.blocks:
        new_bindings: list[Binding] = []
        block_changed = False
        for b in block.bindings:
            value = substitute_expr(b.value, env)
            nb = b if value is b.value else Binding(b.var, value, b.span)
            out = fn(nb, env)
            if out is None:
                out = [nb]
            if len(out) != 1 or out[0] is not b:
                block_changed = True
            new_bindings.extend(out)
        outputs = block.outputs
        if outputs is not None:
            outputs = _map_outputs(block, new_bindings, env)
            block_changed |= len(outputs) != len(block.outputs) or any(
                a is not b for a, b in zip(outputs, block.outputs)
            )
        if not block_changed:
            blocks.append(block)
            continue
        changed = True
        if new_bindings:
            blocks.append(Block(tuple(new_bindings), block.is_dataflow, outputs))
    result = substitute_expr(func.result, env)
    if not changed and result is func.result:
        return func
    return func.replace(blocks=tuple(blocks), result=result)


def _map_outputs(block: Block, new_bindings: list[Binding], env: Env) -> tuple[Var, ...]:
    defined_now = {b.var for b in new_bindings}
    defined_before = {b.var for b in block.bindings}
    out: list[Var] = []
    for o in block.outputs or ():
        n = substitute_expr(o, env)
        keep = isinstance(n, Var) and (n in defined_now or (n is o and o not in defined_before))
        if keep and n not in out:
            out.append(n)  # type: ignore[arg-type]
    return tuple(out)
