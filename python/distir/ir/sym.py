"""Symbolic integers: the one place that compares, simplifies and prints TVM PrimExprs.

Shapes, mesh sizes and slice bounds are ``int`` or TVM ``PrimExpr`` (int64). Python
ints stay ints (the fast path for static programs); a PrimExpr that simplifies to a
constant becomes an int again. Never compare two PrimExprs with ``==`` elsewhere:
that builds an expression. Use :func:`equal`, :func:`prove`, :func:`key`.

Symbolic variables are interned by name (``var("n")`` is always the same TVM Var), so
that a name means one thing across a module and substitution can go by name.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import tvm_ffi
from tvm import sym as _tvm_sym
from tvm import tirx
from tvm.ir.expr import ExprWithOp as PrimExpr
from tvm.ir.prim import expr as _pe

Dim = int | PrimExpr

_VARS: dict[str, tirx.Var] = {}
_ANALYZER = _tvm_sym.Analyzer()

__all__ = [
    "Dim",
    "PrimExpr",
    "SymbolicError",
    "equal",
    "evaluate",
    "free_vars",
    "is_symbolic",
    "key",
    "normalize",
    "parse",
    "prove",
    "prove_divisible",
    "simplify",
    "substitute",
    "to_str",
    "var",
]


class SymbolicError(ValueError):
    """A symbolic expression could not be read or evaluated."""


def var(name: str) -> tirx.Var:
    """The int64 symbolic variable called ``name`` (one object per name)."""
    v = _VARS.get(name)
    if v is None:
        v = tirx.Var(name, "int64")
        _VARS[name] = v
    return v


def is_symbolic(x: object) -> bool:
    return isinstance(x, PrimExpr) and not isinstance(x, _pe.IntImm)


def _as_prim(x: Dim) -> PrimExpr:
    if isinstance(x, bool):
        raise SymbolicError(f"expected an integer, got {x!r}")
    if isinstance(x, int):
        return tirx.IntImm("int64", x)
    return x


def normalize(x: Dim) -> Dim:
    """An int stays an int; a PrimExpr is simplified and becomes an int if constant."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if isinstance(x, _pe.IntImm):
        return int(x.value)
    if isinstance(x, PrimExpr):
        s = _ANALYZER.simplify(x)
        if isinstance(s, _pe.IntImm):
            return int(s.value)
        return s
    raise SymbolicError(f"expected an integer or symbolic expression, got {x!r}")


simplify = normalize


def add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return normalize(_as_prim(a) + _as_prim(b))


def sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return normalize(_as_prim(a) - _as_prim(b))


def mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return normalize(_as_prim(a) * _as_prim(b))


def mul_exact(a: Dim, b: Dim) -> Dim:
    """a * b for shape extents. In shapes every ``x // d`` is exact (specialization checks
    it), so ``(x // d) * (d * k)`` is ``x * k``: a gathered shard gets its full extent back.
    Not for index arithmetic (``worker_id // n`` is not exact)."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    for p, q in ((a, b), (b, a)):
        if isinstance(p, _pe.FloorDiv):
            if prove_divisible(q, p.b):
                return normalize(p.a * _as_prim(floordiv(q, p.b)))
            rest = _cofactor(p.b, q)
            if rest is not None:
                return normalize(tirx.floordiv(p.a, _as_prim(rest)))
    return normalize(_as_prim(a) * _as_prim(b))


def _cofactor(prod, q):
    """``prod / q`` when ``q`` is literally one factor of the product ``prod``, else None."""
    if equal(prod, q):
        return 1
    if isinstance(prod, _pe.Mul):
        for x, y in ((prod.a, prod.b), (prod.b, prod.a)):
            r = _cofactor(x, q)
            if r is not None:
                return mul(r, normalize(y))
    if isinstance(prod, _pe.IntImm) and isinstance(q, int) and q and int(prod.value) % q == 0:
        return int(prod.value) // q
    return None


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(a, _pe.FloorDiv):  # (x // c) // b == x // (c * b): one canonical form
        return normalize(tirx.floordiv(a.a, a.b * _as_prim(b)))
    return normalize(tirx.floordiv(_as_prim(a), _as_prim(b)))


def floormod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return normalize(tirx.floormod(_as_prim(a), _as_prim(b)))


def max_(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return normalize(tirx.max(_as_prim(a), _as_prim(b)))


def min_(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return normalize(tirx.min(_as_prim(a), _as_prim(b)))


def product(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def equal(a: Dim, b: Dim) -> bool:
    """True when ``a`` and ``b`` are provably equal for every value of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) != isinstance(b, int) and not (is_symbolic(a) and is_symbolic(b)):
        # one constant, one symbolic: equal only if the analyzer can show it
        return _ANALYZER.can_prove_equal(_as_prim(a), _as_prim(b))
    pa, pb = _as_prim(a), _as_prim(b)
    if tvm_ffi.structural_equal(pa, pb) or _ANALYZER.can_prove_equal(pa, pb):
        return True
    # Shapes' floor divisions are exact (specialization checks it): compare as rational
    # functions, by evaluating with true division at a few points (identity testing).
    if not (floordivs(pa) or floordivs(pb)):
        return False
    names = sorted(free_vars(pa) | free_vars(pb))
    for point in _RATIONAL_POINTS:
        env = {n: point[i % len(point)] + i for i, n in enumerate(names)}
        try:
            if _eval_rational(pa, env) != _eval_rational(pb, env):
                return False
        except (SymbolicError, ZeroDivisionError):
            return False
    return True


_RATIONAL_POINTS = ((1009, 2003), (3001, 4001), (5003, 7001), (7919, 104729))


def _eval_rational(e, env):
    from fractions import Fraction

    if isinstance(e, int):
        return Fraction(e)
    if isinstance(e, _pe.IntImm):
        return Fraction(int(e.value))
    if isinstance(e, tirx.Var):
        return Fraction(env[str(e.name)])
    t = type(e)
    if t is _pe.Add:
        return _eval_rational(e.a, env) + _eval_rational(e.b, env)
    if t is _pe.Sub:
        return _eval_rational(e.a, env) - _eval_rational(e.b, env)
    if t is _pe.Mul:
        return _eval_rational(e.a, env) * _eval_rational(e.b, env)
    if t is _pe.FloorDiv:
        return _eval_rational(e.a, env) / _eval_rational(e.b, env)
    if t is _pe.Cast:
        return _eval_rational(e.value, env)
    raise SymbolicError(f"not a rational shape expression: {e}")


def prove(cond: PrimExpr) -> bool:
    """True when the analyzer proves ``cond`` for every value of its variables."""
    return bool(_ANALYZER.can_prove(cond))


def prove_divisible(a: Dim, b: Dim) -> bool:
    """True when ``b`` divides ``a`` for every value of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return b != 0 and a % b == 0
    return equal(floormod(a, b), 0)


def key(x: Dim):
    """A hashable key such that ``key(a) == key(b)`` when a and b are structurally equal."""
    if isinstance(x, int):
        return x
    return ("sym", tvm_ffi.structural_hash(x), to_str(x))


# ---------------------------------------------------------------- printing

_BINOPS = {
    _pe.Add: ("+", 1),
    _pe.Sub: ("-", 1),
    _pe.Mul: ("*", 2),
    _pe.FloorDiv: ("//", 2),
    _pe.FloorMod: ("%", 2),
}


def to_str(x: Dim) -> str:
    """Python-syntax text of a dimension: ``128 // num_workers``, ``n * 2 + 1``."""
    if isinstance(x, int):
        return str(x)
    return _fmt(x, 0)


def _fmt(e, prec: int) -> str:
    if isinstance(e, int):
        return str(e)
    if isinstance(e, _pe.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        return str(e.name)
    t = type(e)
    if t in _BINOPS:
        op, p = _BINOPS[t]
        text = f"{_fmt(e.a, p)} {op} {_fmt(e.b, p + 1)}"
        return f"({text})" if p < prec else text
    if t in (_pe.Min, _pe.Max):
        name = "T.min" if t is _pe.Min else "T.max"
        return f"{name}({_fmt(e.a, 0)}, {_fmt(e.b, 0)})"
    if t is _pe.Cast:
        return _fmt(e.value, prec)
    raise SymbolicError(f"cannot print symbolic expression {e}")


# ---------------------------------------------------------------- parsing


def parse(text: str) -> Dim:
    """Read ``"m * num_workers"`` into a Dim without eval: only names, ints and + - * // %."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise SymbolicError(f"'{text}' is not a symbolic integer expression") from err
    return normalize(from_ast(tree.body, text))


_AST_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: tirx.floordiv,
    ast.Mod: tirx.floormod,
}


def from_ast(node: ast.AST, text: str = "", names: Mapping[str, Dim] | None = None) -> PrimExpr:
    """Build a PrimExpr from a Python expression AST (names, ints, + - * // %, T.min/T.max)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return tirx.IntImm("int64", node.value)
    if isinstance(node, ast.Name):
        if names is not None and node.id in names:
            return _as_prim(names[node.id])
        return var(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        return _AST_OPS[type(node.op)](from_ast(node.left, text, names), from_ast(node.right, text, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return tirx.IntImm("int64", 0) - from_ast(node.operand, text, names)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "T"
        and node.func.attr in ("min", "max")
        and len(node.args) == 2
        and not node.keywords
    ):
        a, b = (from_ast(x, text, names) for x in node.args)
        return tirx.min(a, b) if node.func.attr == "min" else tirx.max(a, b)
    where = f" in '{text}'" if text else ""
    raise SymbolicError(
        f"unsupported syntax{where}: symbolic integers use names, integers and + - * // % only"
    )


# ---------------------------------------------------------------- substitution


def free_vars(x: Dim) -> set[str]:
    """Names of the symbolic variables in ``x``."""
    out: set[str] = set()
    _collect(x, out)
    return out


def _collect(e, out: set[str]) -> None:
    if isinstance(e, (int, _pe.IntImm)):
        return
    if isinstance(e, tirx.Var):
        out.add(str(e.name))
        return
    if type(e) in _BINOPS or type(e) in (_pe.Min, _pe.Max):
        _collect(e.a, out)
        _collect(e.b, out)
        return
    if type(e) is _pe.Cast:
        _collect(e.value, out)
        return
    raise SymbolicError(f"unsupported symbolic expression {e}")


_REBUILD = {
    _pe.Add: lambda a, b: a + b,
    _pe.Sub: lambda a, b: a - b,
    _pe.Mul: lambda a, b: a * b,
    _pe.FloorDiv: tirx.floordiv,
    _pe.FloorMod: tirx.floormod,
    _pe.Min: tirx.min,
    _pe.Max: tirx.max,
}


def substitute(x: Dim, values: Mapping[str, Dim]) -> Dim:
    """Replace variables by name and simplify."""
    if isinstance(x, int) or not values:
        return x
    return normalize(_subst(x, values))


def _subst(e, values):
    if isinstance(e, _pe.IntImm):
        return e
    if isinstance(e, tirx.Var):
        v = values.get(str(e.name))
        return e if v is None else _as_prim(v)
    t = type(e)
    if t in _REBUILD:
        return _REBUILD[t](_subst(e.a, values), _subst(e.b, values))
    if t is _pe.Cast:
        return _subst(e.value, values)
    raise SymbolicError(f"unsupported symbolic expression {e}")


def evaluate(x: Dim, values: Mapping[str, int]) -> int:
    """The integer value of ``x`` under ``values`` (pure Python; no TVM call per node)."""
    if isinstance(x, int):
        return x
    return _eval(x, values)


def _eval(e, values) -> int:
    if isinstance(e, _pe.IntImm):
        return int(e.value)
    if isinstance(e, tirx.Var):
        name = str(e.name)
        if name not in values:
            raise SymbolicError(f"no value for symbolic variable '{name}'")
        return int(values[name])
    t = type(e)
    if t is _pe.Add:
        return _eval(e.a, values) + _eval(e.b, values)
    if t is _pe.Sub:
        return _eval(e.a, values) - _eval(e.b, values)
    if t is _pe.Mul:
        return _eval(e.a, values) * _eval(e.b, values)
    if t is _pe.FloorDiv:
        b = _eval(e.b, values)
        if b == 0:
            raise SymbolicError(f"division by zero in {to_str(e)}")
        return _eval(e.a, values) // b
    if t is _pe.FloorMod:
        b = _eval(e.b, values)
        if b == 0:
            raise SymbolicError(f"division by zero in {to_str(e)}")
        return _eval(e.a, values) % b
    if t is _pe.Min:
        return min(_eval(e.a, values), _eval(e.b, values))
    if t is _pe.Max:
        return max(_eval(e.a, values), _eval(e.b, values))
    if t is _pe.Cast:
        return _eval(e.value, values)
    raise SymbolicError(f"unsupported symbolic expression {e}")


def floordivs(x: Dim):
    """Every ``a // b`` inside ``x`` (for divisibility checks at specialization)."""
    out = []
    _floordivs(x, out)
    return out


def _floordivs(e, out) -> None:
    if isinstance(e, (int, _pe.IntImm, tirx.Var)):
        return
    if type(e) is _pe.FloorDiv:
        out.append((e.a, e.b))
    if type(e) in _REBUILD:
        _floordivs(e.a, out)
        _floordivs(e.b, out)
    elif type(e) is _pe.Cast:
        _floordivs(e.value, out)
