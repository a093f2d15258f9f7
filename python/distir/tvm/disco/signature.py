"""What a built function takes, read from the build itself, to check every worker's pieces first.

A piece of the wrong shape or dtype reaches the Relax VM's own check inside a Disco worker, and
an error there aborts the caller (worker 0 is a thread of the caller in every session kind;
TVM 0.27 does not catch it). So :func:`check_pieces` compares every worker's piece with what the
function takes before any worker runs. The build keeps no typed signature, but its VM checks
each parameter with an error context that TVM writes into the executable's constant pool, one
per parameter: ``ErrorContext(fn=main, loc=param[2], param=x, annotation=R.Tensor((s, 128),
dtype="float32"))``. Those annotations are read here (the executable's ``stats()`` lists the
pool); a dim that is an expression of the sizes is evaluated with the sizes the run gives.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tvm import relax

from ...ir import sym
from ...ir.sym_parse import parse
from ..errors import DiscoRunError

__all__ = ["ParamSpec", "check_pieces", "param_specs"]

_CONTEXT = re.compile(r"ErrorContext\(fn=(?P<fn>[^,()]+), loc=param\[(?P<index>\d+)\], param=(?P<name>[^,()]+), "
                      r"annotation=R\.Tensor\(")


def _call_args(text: str, start: int) -> str | None:
    """The text between the parenthesis before ``start`` and the one that closes it (quotes skipped)."""
    depth, quoted = 1, False
    for i in range(start, min(len(text), start + 4096)):
        c = text[i]
        if c == '"':
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


@dataclass(frozen=True)
class ParamSpec:
    """One tensor parameter: its name, dtype and dims (text as TVM prints them; None: any rank)."""

    name: str
    dtype: str
    dims: tuple[str, ...] | None


def param_specs(lib, func: str) -> dict[int, ParamSpec]:
    """Parameter index -> what ``func`` of the loaded library ``lib`` takes, for its tensor parameters."""
    try:
        stats = relax.VMExecutable(lib).stats()
    except Exception as err:  # noqa: BLE001 - TVM raises several error types
        raise DiscoRunError(f"the built module's signature cannot be read: {err}") from None
    specs: dict[int, ParamSpec] = {}
    for m in _CONTEXT.finditer(stats):
        if m["fn"].strip() != func:
            continue
        inner = _call_args(stats, m.end())
        try:  # R.Tensor((d0, d1), dtype="float32"), R.Tensor(dtype="float32", ndim=2), ... read as a call's arguments
            call = ast.parse(f"f({inner})", mode="eval").body
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        except (SyntaxError, ValueError, TypeError):
            raise DiscoRunError(f"the built function '{func}' has a parameter annotation distir cannot read: "
                                f"{(inner or '')[:200]!r}") from None
        dims = None
        if call.args and isinstance(call.args[0], ast.Tuple):
            dims = tuple(ast.unparse(e) for e in call.args[0].elts)
        elif isinstance(kwargs.get("ndim"), int) and kwargs["ndim"] >= 0:
            dims = ("?",) * kwargs["ndim"]
        specs[int(m["index"])] = ParamSpec(m["name"].strip(), str(kwargs.get("dtype", "")), dims)
    return specs


def _dim_value(text: str, values: Mapping[str, int]) -> int | None:
    """A dim's value under the run's sizes; None where it is open (``?``) or names no size the run gives."""
    if text == "?":
        return None
    try:
        return int(sym.evaluate(parse(text), values))
    except Exception:  # noqa: BLE001 - an expression distir cannot read is left to the rank and dtype checks
        return None


def check_pieces(
    specs: Mapping[int, ParamSpec],
    first: int,
    pieces: Sequence[Mapping[int, np.ndarray] | None],
    values: Mapping[str, int],
    total: int,
    func: str,
) -> None:
    """Every worker's piece of every parameter (index ``first + i`` of ``func``) has the dtype and
    shape the build takes; one DiscoRunError line naming the parameter and the worker otherwise."""
    for i, per in enumerate(pieces):
        if per is None:
            continue
        index = first + i
        spec = specs.get(index)
        if spec is None:
            raise DiscoRunError(f"the built function '{func}' takes no tensor as parameter {index}; "
                                f"got pieces for it")
        want = None if spec.dims is None else [_dim_value(d, values) for d in spec.dims]
        shape0 = None
        for w in range(total):
            piece = per.get(w) if isinstance(per, Mapping) else (per[w] if w < len(per) else None)
            where = f"parameter '{spec.name}' of '{func}', worker {w}"
            if not isinstance(piece, np.ndarray):
                raise DiscoRunError(f"{where}: expected a numpy array, got {type(piece).__name__}")
            if spec.dtype and str(piece.dtype) != spec.dtype:
                raise DiscoRunError(f"{where}: expected dtype {spec.dtype}, got {piece.dtype}")
            if want is not None and (len(want) != piece.ndim or any(
                    v is not None and v != n for v, n in zip(want, piece.shape))):
                shown = ", ".join(d if v is None else str(v) for d, v in zip(spec.dims, want))
                raise DiscoRunError(f"{where}: expected shape ({shown}), got {tuple(piece.shape)}")
            if shape0 is not None and piece.shape != shape0:  # Disco scatters one shape to every worker
                raise DiscoRunError(f"{where}: shape {tuple(piece.shape)} differs from worker 0's {shape0}")
            shape0 = piece.shape if shape0 is None else shape0
