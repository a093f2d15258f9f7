"""Exact comparison of float outputs: both programs run in float64 on small integer inputs.

A float program built only of ops whose results are sums, differences and products of their
inputs (and moves, maxima and minima of them) computes, on integer inputs, values that are
integers (multiples of ``2^-e`` after a mean over ``2^k`` elements). While every such value,
and every partial sum of its terms in any order, stays below ``2^53`` in magnitude (in units
of ``2^-e``), float64 holds each one exactly: no rounding happens, so the order of a sum (a
worker's block first, then the all-reduce) does not matter, and the lowered program's outputs
must equal the global program's bit for bit. :func:`exact_plan` reads that bound off the
global function (input range, reduction lengths, depth) and refuses, naming the op, where it
cannot be given. The argument in full: docs/verify.md, "Exact floats".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Call, Constant, Function, IRModule, Tuple, Var

__all__ = ["INPUT_MAX", "LIMIT", "ExactPlan", "exact_plan", "float64_module", "small_integer_inputs"]

#: float inputs are drawn as integers in [-INPUT_MAX, INPUT_MAX]
INPUT_MAX = 3
#: every value's magnitude, in units of its grid 2^-e, must stay at or below this: float64's exact integers
LIMIT = 2 ** 53

_FLOATS = ("float16", "bfloat16", "float32", "float64")
# the value is one of its inputs' elements (or zero): the bound and grid are the largest of theirs
_PICKS = {"reshape", "permute_dims", "strided_slice", "concat", "expand_dims", "squeeze", "broadcast_to", "repeat",
          "tile", "tril", "triu", "nn.relu", "max", "min", "maximum", "minimum", "negative", "abs",
          "dist.annotate_sharding", "dist.redistribute"}
_POLY = {"add", "subtract", "multiply", "matmul", "sum", "mean", "square", "zeros", "ones"} | _PICKS


@dataclass(frozen=True)
class ExactPlan:
    """The bound that makes the exact comparison sound: every float value is a multiple of
    ``2^-grid`` of magnitude at most ``bound`` (so ``bound * 2^grid <= 2^53``)."""

    bound: float
    grid: int

    def describe(self) -> str:
        units = self.bound * 2 ** self.grid
        return (f"floats run in float64 on integers in [-{INPUT_MAX}, {INPUT_MAX}]: every value a multiple of "
                f"2^-{self.grid} at most {self.bound:g} in size, {units:.3g} <= 2^53 units, so none is rounded")


def _is_float(t) -> bool:
    return str(getattr(t, "dtype", "")) in _FLOATS


def _shape(t, env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(sym.evaluate(d, env) for d in t.shape)


def exact_plan(f: Function, env: Mapping[str, int], max_count: int) -> ExactPlan | str:
    """The bound on ``f``'s float values on inputs in ``[-INPUT_MAX, INPUT_MAX]``, or why there is
    none (the ops that keep the tolerance, or the bound past 2^53). ``env``: every size but the
    count; ``max_count``: the largest count run (a partial input's parts grow with it)."""
    bound: dict[Var, tuple[float, int]] = {}
    for p in f.params:
        if _is_float(p.type):
            placement = getattr(p.type, "placement", None)
            partial = placement is not None and placement.has_partial
            # a partial input is split into parts +-v*2^k (|k| <= 2) and v/2: up to 4|v| each, grid 2^-2
            bound[p] = (4.0 * max_count * INPUT_MAX, 2) if partial else (float(INPUT_MAX), 0)
    forced: list[str] = []  # the first ops whose values are not exact; what they feed is not named again
    tainted: set[Var] = set()
    for b in f.bindings():
        v, t = b.value, b.var.type
        if not _is_float(t):
            continue  # integers and bools are exact anyway; they reach floats only through other ops
        operands = [x for a in getattr(v, "args", ()) for x in (a.fields if isinstance(a, Tuple) else (a,))]
        if not isinstance(v, Call):
            if isinstance(v, Var) and v in bound:
                bound[b.var] = bound[v]
            else:
                forced.append(f"`{b.var.name}` (not an op call)")
                tainted.add(b.var)
            continue
        if any(isinstance(a, Var) and a in tainted for a in operands):
            tainted.add(b.var)
            continue
        name = v.op.name
        args, why = [], ""
        for a in operands:
            if isinstance(a, Var) and _is_float(a.type):
                if a not in bound:
                    why = f"{name} at `{b.var.name}` (its input `{a.name}` has no bound)"
                    break
                args.append(bound[a])
            elif isinstance(a, Constant) and _is_float(a.type):
                c = np.asarray(a.data, dtype=np.float64)
                if not np.all(c == np.round(c)):
                    why = f"{name} at `{b.var.name}` (a constant that is not an integer)"
                    break
                args.append((float(np.abs(c).max(initial=0.0)), 0))
        if not why and name not in _POLY:
            why = name
        if not why and not args and name not in ("zeros", "ones"):
            why = f"{name} at `{b.var.name}` (no float input)"
        if not why:
            try:
                bound[b.var] = _step(name, v, args, env)
            except _NotExact as err:
                why = str(err)
        if why:
            forced.append(why)
            tainted.add(b.var)
    if forced:
        names = sorted(set(forced))
        return f"op{'s' if len(names) > 1 else ''} {', '.join(names)} (not sums, products, moves or maxima)"
    if not bound:
        return "no float values"
    worst = max(bound.values(), key=lambda mg: mg[0] * 2 ** mg[1])
    top = max(g for _, g in bound.values())
    largest = max(m for m, _ in bound.values())
    if worst[0] * 2 ** worst[1] > LIMIT or largest * 2 ** top > LIMIT:
        return (f"the bound on its values, {largest:.3g} in units of 2^-{top}, is past 2^53 "
                "(long reductions or deep products)")
    return ExactPlan(largest, top)


class _NotExact(Exception):
    pass


def _step(name: str, call: Call, args: Sequence[tuple[float, int]], env) -> tuple[float, int]:
    """(bound, grid) of one op's value from its float inputs'."""
    if name in ("zeros", "ones"):
        return 1.0, 0
    if name in _PICKS:
        return max(m for m, _ in args), max(g for _, g in args)
    if name in ("add", "subtract"):
        return sum(m for m, _ in args), max(g for _, g in args)
    if name == "multiply":
        (m1, g1), (m2, g2) = args
        return m1 * m2, g1 + g2
    if name == "square":
        (m, g), = args
        return m * m, 2 * g
    x = call.args[0].type
    shape = _shape(x, env)
    if name == "matmul":
        (m1, g1), (m2, g2) = args
        return shape[-1] * m1 * m2, g1 + g2
    axes = call.attrs.get("axis")
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    n = math.prod(shape[a] for a in axes)
    (m, g), = args
    if name == "sum":
        return n * m, g
    if n & (n - 1):  # mean: a division by n, exact only for a power of two
        raise _NotExact(f"mean over {n} elements (not a power of two)")
    return m, g + n.bit_length() - 1


def float64_module(mod: IRModule) -> IRModule:
    """``mod`` with every float dtype float64: the same statements, in the dtype whose integers
    are exact up to 2^53 (printed and parsed again: the printer writes every dtype in quotes)."""
    from ..script import parse

    text = mod.script()
    for dtype in ("bfloat16", "float16", "float32"):
        text = text.replace(f'"{dtype}"', '"float64"')
    try:
        return parse(text)
    except DistirError as err:
        raise DistirError(f"the module does not run in float64: {str(err).splitlines()[0]}") from None


def small_integer_inputs(inputs: Sequence[np.ndarray], seed: int) -> list[np.ndarray]:
    """Float inputs redrawn as float64 integers in ``[-INPUT_MAX, INPUT_MAX]``; the others kept."""
    rng = np.random.default_rng([seed, 0xE8AC7])
    out = []
    for x in inputs:
        x = np.asarray(x)
        if x.dtype.kind == "f" or "float" in str(x.dtype):
            out.append(rng.integers(-INPUT_MAX, INPUT_MAX, x.shape, endpoint=True).astype(np.float64))
        else:
            out.append(x)
    return out
