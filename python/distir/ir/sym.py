"""Symbolic integers: the one place that builds, compares, simplifies and prints TVM PrimExprs.

Shapes, mesh sizes and slice bounds are ``int`` or TVM ``PrimExpr`` (int64). Python
ints stay ints (the fast path for static programs); a PrimExpr that simplifies to a
constant becomes an int again. Never compare two PrimExprs with ``==`` elsewhere:
that builds an expression. Use :func:`equal`, :func:`prove_ge` and friends, :func:`key`.

Symbolic variables are interned by name (``var("n")`` is always the same TVM Var), so
that a name means one thing across a module and substitution can go by name.

One analyzer serves every simplification and proof, and it knows that every symbolic
variable is non-negative: a variable is a size (``num_workers``, a sequence length) or a
worker id, never below 0. So ``T.max(n, 0)`` simplifies to ``n``, and :func:`prove_ge`,
:func:`equal` and :func:`simplify` all reason under the same assumption. Code outside
this module (and the ``distir.tvm`` package, which builds Relax) does not call TVM's
integer API (``tvm.sym``, ``tvm.tirx``, ``tvm_ffi.structural_*``) itself.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
from collections.abc import Callable, Mapping, Sequence

import tvm_ffi
from tvm import sym as _tvm_sym
from tvm import tirx
from tvm.ir.expr import Call as _pe_call
from tvm.ir.expr import ExprWithOp as PrimExpr
from tvm.ir.prim import expr as _pe

from ..errors import DistirError

Dim = int | PrimExpr

_VARS: dict[str, tirx.Var] = {}
_ANALYZER = _tvm_sym.Analyzer()
_NONNEG = _tvm_sym.ConstIntBound(0, _tvm_sym.ConstIntBound.POS_INF)

__all__ = [
    "Dim",
    "PrimExpr",
    "SymbolicError",
    "add",
    "assume_positive",
    "ceildiv",
    "clamp",
    "equal",
    "evaluate",
    "floordiv",
    "floormod",
    "fold",
    "free_vars",
    "from_tvm",
    "identical",
    "is_symbolic",
    "key",
    "max_",
    "min_",
    "mul",
    "normalize",
    "opaque",
    "product",
    "prove",
    "prove_divisible",
    "prove_equal",
    "prove_ge",
    "prove_le",
    "prove_lt",
    "readable_conditions",
    "simplify",
    "structural_hash",
    "sub",
    "substitute",
    "to_prim",
    "to_str",
    "var",
]


class SymbolicError(DistirError, ValueError):
    """A symbolic expression could not be read or evaluated.

    ``node`` is the offending part of the expression's ``ast`` when reading one (the
    parser points its caret there), else None."""

    def __init__(self, message: str, node: ast.AST | None = None):
        super().__init__(message)
        self.node = node


def var(name: str) -> tirx.Var:
    """The int64 symbolic variable called ``name`` (one object per name), known to be >= 0."""
    v = _VARS.get(name)
    if v is None:
        v = tirx.Var(name, "int64")
        _ANALYZER.update(v, _NONNEG)
        _VARS[name] = v
    return v


def is_symbolic(x: object) -> bool:
    return isinstance(x, PrimExpr) and not isinstance(x, _pe.IntImm)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def to_prim(x: Dim) -> PrimExpr:
    """``x`` as a TVM PrimExpr: an int becomes an int64 immediate (SymbolicError outside
    int64), a PrimExpr stays as it is."""
    if isinstance(x, bool):
        raise SymbolicError(f"expected an integer, got {x!r}")
    if isinstance(x, int):
        if not INT64_MIN <= x <= INT64_MAX:
            raise SymbolicError(f"the size {x} is out of the int64 range")
        return tirx.IntImm("int64", x)
    return x


# Per expression object (kept alive by the entry, so that its id stays its own): its simplified
# form and its key. Types are built from the same few dim objects again and again (every layer of a
# stack has the same shapes), and simplifying or printing one costs far more than a lookup.
_MEMO_LIMIT = 1 << 16
_NORMAL: dict[int, tuple[PrimExpr, Dim]] = {}
_KEYS: dict[int, tuple[PrimExpr, tuple]] = {}


def _remember(memo: dict, x, value):
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[id(x)] = (x, value)
    return value


_RESULTS: dict[tuple, object] = {}  # (operation, key of a, key of b) -> its result


def _memo_clear() -> None:
    """Forget every remembered result: the analyzer's knowledge changed (:class:`assume_positive`)."""
    _NORMAL.clear()
    _RESULTS.clear()


def _remembered(fn):
    """``fn(a, b)`` on dims, remembered by the dims' keys when one is symbolic (every layer of a model
    asks for the same blocks and products; the analyzer takes far longer than a lookup)."""
    name = fn.__name__

    def memo(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return fn(a, b)
        k = (name, key(a), key(b))
        hit = _RESULTS.get(k, _RESULTS)
        if hit is _RESULTS:
            hit = fn(a, b)
            if len(_RESULTS) >= _MEMO_LIMIT:
                _RESULTS.clear()
            _RESULTS[k] = hit
        return hit

    memo.__name__, memo.__qualname__, memo.__doc__, memo.__wrapped__ = name, fn.__qualname__, fn.__doc__, fn
    return memo


def normalize(x: Dim) -> Dim:
    """An int stays an int; a PrimExpr is simplified and becomes an int if constant."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    hit = _NORMAL.get(id(x))
    if hit is not None and hit[0] is x:
        return hit[1]
    if isinstance(x, _pe.IntImm):
        return int(x.value)
    if isinstance(x, PrimExpr):
        try:
            s = _ANALYZER.simplify(x)
        except Exception as err:  # noqa: BLE001 - TVM reports overflow and the like with several error types
            if "exceeds range" in str(err):
                raise SymbolicError(f"the size {_fmt_safe(x)} overflows int64") from None
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            raise SymbolicError(f"cannot simplify {_fmt_safe(x)}: {lines[-1] if lines else type(err).__name__}") from None
        if isinstance(s, _pe.IntImm):
            return _remember(_NORMAL, x, int(s.value))
        _remember(_NORMAL, s, s)  # simplified: a fixed point
        return _remember(_NORMAL, x, s)
    raise SymbolicError(f"expected an integer or symbolic expression, got {x!r}")


simplify = normalize


def _fmt_safe(x) -> str:
    try:
        return to_str(x)
    except Exception:  # noqa: BLE001 - only for messages
        return str(x)


@_remembered
def add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return normalize(to_prim(a) + to_prim(b))


@_remembered
def sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return normalize(to_prim(a) - to_prim(b))


@_remembered
def mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return normalize(to_prim(a) * to_prim(b))


@_remembered
def mul_exact(a: Dim, b: Dim) -> Dim:
    """a * b for shape extents. In shapes every ``x // d`` is exact (specialization checks
    it), so ``(x // d) * (d * k)`` is ``x * k``: a gathered shard gets its full extent back.
    Not for index arithmetic (``worker_id // n`` is not exact)."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    for p, q in ((a, b), (b, a)):
        if isinstance(p, _pe.FloorDiv):
            if prove_divisible(q, p.b):
                return normalize(p.a * to_prim(floordiv(q, p.b)))
            rest = _cofactor(p.b, q)
            if rest is not None:
                return normalize(tirx.floordiv(p.a, to_prim(rest)))
    return normalize(to_prim(a) * to_prim(b))


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


@_remembered
def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(a, _pe.FloorDiv):  # (x // c) // b == x // (c * b): one canonical form
        return normalize(tirx.floordiv(a.a, a.b * to_prim(b)))
    return normalize(tirx.floordiv(to_prim(a), to_prim(b)))


@_remembered
def floormod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return normalize(tirx.floormod(to_prim(a), to_prim(b)))


@_remembered
def max_(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return normalize(tirx.max(to_prim(a), to_prim(b)))


@_remembered
def min_(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return normalize(tirx.min(to_prim(a), to_prim(b)))


def clamp(x: Dim, lo: Dim, hi: Dim) -> Dim:
    """``min(max(x, lo), hi)``: ``x`` moved into ``[lo, hi]`` (``hi`` wins when ``lo > hi``)."""
    if isinstance(x, int) and isinstance(lo, int) and isinstance(hi, int):
        return min(max(x, lo), hi)
    return normalize(tirx.min(tirx.max(to_prim(x), to_prim(lo)), to_prim(hi)))


@_remembered
def ceildiv(a: Dim, b: Dim) -> Dim:
    """The exact ceiling of ``a / b`` for a positive divisor ``b``.

    Ints are divided exactly (``-(-a // b)``, no float rounding, any size); a symbolic
    value is ``(a + b - 1) // b``, which is the ceiling for every ``a`` once ``b >= 1``.
    A divisor that is 0, or a negative constant, is a SymbolicError. (A symbolic divisor is
    taken to be positive: it is a size.)

    Note for shapes: :func:`equal` and :func:`mul_exact` take every ``//`` in a shape to be
    exact (specialization checks it), which a ceiling is not; uneven shards using this need
    that assumption revisited.
    """
    if isinstance(b, int) and not isinstance(b, bool):
        if b == 0:
            raise SymbolicError(f"ceildiv of {_fmt_safe(a)} by zero")
        if b < 0:
            raise SymbolicError(f"ceildiv needs a positive divisor, got {b}")
        if isinstance(a, int) and not isinstance(a, bool):
            return -(-a // b)
        if b == 1:
            return normalize(a)
    elif _is_zero(b):
        raise SymbolicError(f"ceildiv of {_fmt_safe(a)} by zero ({_fmt_safe(b)})")
    if prove_divisible(a, b):  # 2 * n / n is 2, not (2 * n + n - 1) // n
        return floordiv(a, b)
    pb = to_prim(b)
    return normalize(tirx.floordiv(to_prim(a) + (pb - tirx.IntImm("int64", 1)), pb))


def product(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


@_remembered
def equal(a: Dim, b: Dim) -> bool:
    """True when ``a`` and ``b`` are provably equal for every value of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) != isinstance(b, int) and not (is_symbolic(a) and is_symbolic(b)):
        # one constant, one symbolic: equal only if the analyzer can show it
        return _ANALYZER.can_prove_equal(to_prim(a), to_prim(b))
    pa, pb = to_prim(a), to_prim(b)
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
    """True when the analyzer proves ``cond`` for every (non-negative) value of its variables."""
    return bool(_ANALYZER.can_prove(cond))


@_remembered
def prove_ge(a: Dim, b: Dim) -> bool:
    """True when ``a >= b`` for every value of their variables (all non-negative)."""
    if isinstance(a, int) and isinstance(b, int):
        return a >= b
    return bool(_ANALYZER.can_prove(to_prim(a) >= to_prim(b)))


@_remembered
def prove_le(a: Dim, b: Dim) -> bool:
    """True when ``a <= b`` for every value of their variables (all non-negative)."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    return bool(_ANALYZER.can_prove(to_prim(a) <= to_prim(b)))


@_remembered
def prove_lt(a: Dim, b: Dim) -> bool:
    """True when ``a < b`` for every value of their variables (all non-negative)."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return bool(_ANALYZER.can_prove(to_prim(a) < to_prim(b)))


@_remembered
def prove_equal(a: Dim, b: Dim) -> bool:
    """True when the analyzer proves ``a == b``: :func:`equal` without its reading of every
    ``//`` as exact, for comparing with expressions that are not distir shapes."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    pa, pb = to_prim(a), to_prim(b)
    return bool(tvm_ffi.structural_equal(pa, pb) or _ANALYZER.can_prove_equal(pa, pb))


class assume_positive:
    """``with assume_positive(names):`` the analyzer also knows each named variable is >= 1.

    For comparisons that need sizes to be at least 1 (``m <= m * n``), where the
    default assumption (every variable >= 0) is not enough. Not for worker ids, which
    start at 0. Simplifications made inside the block may rely on it: use it around
    proofs, not around building values that outlive it."""

    def __init__(self, names):
        self._names = sorted(names)
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        _memo_clear()  # results simplified without the assumption are not those it gives, and back
        with contextlib.ExitStack() as stack:  # a failure part way leaves no scope entered
            for n in self._names:
                stack.enter_context(_ANALYZER.constraint_scope(var(n) >= 1))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc):
        self._stack.close()
        _memo_clear()
        return False


@_remembered
def prove_divisible(a: Dim, b: Dim) -> bool:
    """True when ``b`` divides ``a`` for every value of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return b != 0 and a % b == 0
    return equal(floormod(a, b), 0)


def key(x: Dim):
    """A hashable key such that ``key(a) == key(b)`` when a and b are structurally equal."""
    if isinstance(x, int):
        return x
    hit = _KEYS.get(id(x))
    if hit is not None and hit[0] is x:
        return hit[1]
    return _remember(_KEYS, x, _Key(x))


class _Key:
    """A symbolic dim as a dict key: its structural hash, compared structurally (nothing printed)."""

    __slots__ = ("expr", "hash")

    def __init__(self, expr: PrimExpr):
        self.expr, self.hash = expr, tvm_ffi.structural_hash(expr)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and self.hash == other.hash and bool(tvm_ffi.structural_equal(self.expr, other.expr))

    def __repr__(self) -> str:
        return f"key({to_str(self.expr)})"


def structural_hash(x: Dim) -> int:
    """A hash that agrees with :func:`identical` (cheaper than :func:`key`: no printing)."""
    if isinstance(x, int):
        return hash(x)
    return tvm_ffi.structural_hash(x)


def identical(a: Dim, b: Dim) -> bool:
    """True when ``a`` and ``b`` are the same expression (structurally; nothing is proved)."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return bool(tvm_ffi.structural_equal(a, b))


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


_readable = contextvars.ContextVar("distir_sym_readable_conditions", default=False)


@contextlib.contextmanager
def readable_conditions():
    """Within it, :func:`to_str` writes a 0/1 factor as the condition it is, for people to read:
    ``T.min(1, T.max(a - b, b - a))`` as ``(a != b)`` and ``T.min(1, T.max(x, 0))`` as ``(x > 0)``
    (both 1 where the condition holds, else 0, for integers). Display only:
    :func:`~distir.ir.sym_parse.parse` does not read it back."""
    token = _readable.set(True)
    try:
        yield
    finally:
        _readable.reset(token)


def _as_condition(e) -> str | None:
    """The condition a 0/1 factor ``min(1, max(u, v))`` of integers stands for, or None."""
    if type(e) is not _pe.Min:
        return None
    one, inner = (e.a, e.b) if isinstance(e.a, _pe.IntImm) else (e.b, e.a)
    if not (isinstance(one, _pe.IntImm) and int(one.value) == 1 and type(inner) is _pe.Max):
        return None
    u, v = inner.a, inner.b
    for x, y in ((u, v), (v, u)):
        if isinstance(y, _pe.IntImm) and int(y.value) == 0:  # min(1, max(x, 0)) = (x >= 1)
            return f"({_fmt(x, 0)} > 0)"
    if not _is_zero(normalize(u + v)):  # min(1, max(d, -d)) = min(1, |d|) = (d != 0)
        return None
    if type(u) is _pe.Sub:
        return f"({_fmt(u.a, 0)} != {_fmt(u.b, 0)})"
    return f"({_fmt(u, 0)} != 0)"


def _as_ceildiv(e):
    """``(a, b)`` when ``e`` is the simplifier's form of ``ceil(a / b)``, ``(a - 1) // b + 1``
    with a constant or ``x - 1`` numerator (how block sizes of uneven splits print)."""
    if type(e) is _pe.FloorDiv and type(e.a) is _pe.Add and isinstance(e.b, _pe.IntImm):
        # (x + (b - 1)) // b with a constant b
        if isinstance(e.a.b, _pe.IntImm) and int(e.a.b.value) == int(e.b.value) - 1 > 0:
            return e.a.a, e.b
        return None
    if type(e) is not _pe.Add or not (isinstance(e.b, _pe.IntImm) and int(e.b.value) == 1):
        return None
    q = e.a
    if type(q) is not _pe.FloorDiv:
        return None
    p = q.a
    if isinstance(p, _pe.IntImm):
        return int(p.value) + 1, q.b
    if type(p) is _pe.Sub and isinstance(p.b, _pe.IntImm) and int(p.b.value) == 1:
        return p.a, q.b
    if type(p) is _pe.Add and isinstance(p.b, _pe.IntImm) and int(p.b.value) == -1:
        return p.a, q.b
    if type(p) is _pe.FloorDiv:  # nested: ceil(ceil(n / a) / b) prints as T.ceildiv(T.ceildiv(n, a), b)
        inner = _as_ceildiv(normalize(p + 1))
        if inner is not None:
            return normalize(p + 1), q.b
    return None


def _trailing_zeros(c: int) -> int:
    return (c & -c).bit_length() - 1 if c else 0


def _refold_ceildiv(e):
    """The text of a sum ``... + c // x * k + m`` with each block term written back as
    ``T.ceildiv(c + 1, x) * k`` (and ``(y - 1) // x * k`` as ``T.ceildiv(y, x) * k``), taking
    ``k`` from the constant ``m`` while it lasts: the simplifier multiplies uneven block sizes
    out into that form. A constant numerator is refolded only when ``c + 1`` is the rounder
    number (``383`` -> ``384``, not ``384`` -> ``385``). None when no term refolds. Printing
    only: both forms are equal for every ``x``."""
    if type(e) is not _pe.Add or not isinstance(e.b, _pe.IntImm):
        return None
    m = int(e.b.value)
    terms, rest = [], e.a
    while type(rest) is _pe.Add:
        terms.append(rest.b)
        rest = rest.a
    terms.append(rest)
    terms.reverse()
    texts, refolded = [], False
    for term in terms:
        body, k = term, 1
        if type(body) is _pe.Mul and isinstance(body.b, _pe.IntImm):
            body, k = body.a, int(body.b.value)
        numerator = None
        if type(body) is _pe.FloorDiv and 0 < k <= m:
            top = body.a
            if isinstance(top, _pe.IntImm):
                c = int(top.value)
                if c >= 1 and _trailing_zeros(c + 1) > _trailing_zeros(c):
                    numerator = str(c + 1)
            elif type(top) is _pe.Add and isinstance(top.b, _pe.IntImm) and int(top.b.value) == -1 or type(top) is _pe.Sub and isinstance(top.b, _pe.IntImm) and int(top.b.value) == 1:
                numerator = _fmt(top.a, 0)
        if numerator is None:
            texts.append(_fmt(term, 1))
            continue
        block = f"T.ceildiv({numerator}, {_fmt(body.b, 0)})"
        texts.append(block if k == 1 else f"{block} * {k}")
        m -= k
        refolded = True
    if not refolded:
        return None
    if m:
        texts.append(str(m))
    return " + ".join(texts)


def _fmt(e, prec: int) -> str:
    if isinstance(e, int):
        return str(e)
    if isinstance(e, _pe.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        return str(e.name)
    t = type(e)
    refolded = _refold_ceildiv(e)
    if refolded is not None:
        return f"({refolded})" if prec > 1 else refolded
    ceil = _as_ceildiv(e)
    if ceil is not None:
        return f"T.ceildiv({_fmt(ceil[0], 0)}, {_fmt(ceil[1], 0)})"
    if t in _BINOPS:
        op, p = _BINOPS[t]
        text = f"{_fmt(e.a, p)} {op} {_fmt(e.b, p + 1)}"
        return f"({text})" if p < prec else text
    if t is _pe.Min and _readable.get():
        condition = _as_condition(e)
        if condition is not None:
            return condition
    if t in (_pe.Min, _pe.Max):
        name = "T.min" if t is _pe.Min else "T.max"
        return f"{name}({_fmt(e.a, 0)}, {_fmt(e.b, 0)})"
    if t is _pe.Cast:
        return _fmt(e.value, prec)
    if _is_opaque(e):
        name, args = _opaque_parts(e)
        return f"{name}({', '.join(_fmt(a, 0) for a in args)})"
    raise SymbolicError(f"cannot print symbolic expression {e}")


def _is_zero(x: Dim) -> bool:
    """True for 0, and for a divisor the analyzer simplifies to 0 (``n - n``)."""
    if isinstance(x, int):
        return x == 0
    if isinstance(x, _pe.IntImm):
        return int(x.value) == 0
    try:
        s = _ANALYZER.simplify(x)
    except (ValueError, RuntimeError):
        return False
    return isinstance(s, _pe.IntImm) and int(s.value) == 0


# ---------------------------------------------------------------- substitution


# ---------------------------------------------------------------- opaque functions of the sizes

_OPAQUE: dict[str, Callable[..., int]] = {}
_OPAQUE_OP = "tirx.call_pure_extern"


def opaque(name: str, fn: Callable[..., int], args: Sequence[Dim]) -> Dim:
    """``name(args)``: an integer that ``fn`` computes from the values of ``args``, for a count
    no closed formula gives exactly (the bytes of a block exchange: a sum over the devices).
    It prints as ``name(args)``, evaluates by calling ``fn``, and takes part in sums and
    products like any size; the provers treat it as an unknown. With concrete ``args`` it is
    ``fn``'s value. ``name`` must say what ``fn`` computes: one name, one function."""
    if all(isinstance(a, int) for a in args):
        return int(fn(*args))
    _OPAQUE[name] = fn
    return tirx.call_pure_extern("int64", name, *(to_prim(a) for a in args))


def _is_opaque(e) -> bool:
    return type(e) is _pe_call and str(e.op.name) == _OPAQUE_OP


def _opaque_parts(e):
    return str(e.args[0].value), list(e.args[1:])


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
    if _is_opaque(e):
        for a in _opaque_parts(e)[1]:
            _collect(a, out)
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


def from_tvm(e) -> Dim:
    """A TVM integer expression on other TVM variables (a Relax function's own, an imported
    module's) as a distir Dim.

    Each variable becomes distir's int64 variable of the same name, so the one analyzer,
    with its non-negativity, reasons about it. A SymbolicError for what distir's dims do
    not use (a select, a comparison, a float)."""
    if isinstance(e, int) and not isinstance(e, bool):
        return e
    if isinstance(e, _pe.IntImm) and str(e.ty) != "bool":
        return int(e.value)
    if not isinstance(e, PrimExpr) or not str(e.ty).startswith(("int", "uint")):
        raise SymbolicError(f"expected a TVM integer expression, got {e!r}")
    return normalize(_subst(e, _Adopt()))


class _Adopt:
    """Substitution values mapping every name to distir's variable of that name."""

    def get(self, name):
        return var(name)


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
        return e if v is None else to_prim(v)
    t = type(e)
    if t in _REBUILD:
        a, b = _subst(e.a, values), _subst(e.b, values)
        if t in (_pe.FloorDiv, _pe.FloorMod) and isinstance(b, _pe.IntImm) and int(b.value) == 0:
            raise SymbolicError(f"{_fmt(e, 0)} divides by zero at {', '.join(f'{k}={v}' for k, v in values.items())}")
        return _REBUILD[t](a, b)
    if t is _pe.Cast:
        return _subst(e.value, values)
    if _is_opaque(e):
        name, args = _opaque_parts(e)
        new = [normalize(_subst(a, values)) for a in args]
        return to_prim(opaque(name, _OPAQUE[name], new))
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
    if _is_opaque(e):
        name, args = _opaque_parts(e)
        return int(_OPAQUE[name](*(_eval(a, values) for a in args)))
    raise SymbolicError(f"unsupported symbolic expression {e}")


_FOLD_OPS = {_pe.Add: "add", _pe.Sub: "sub", _pe.Mul: "mul", _pe.FloorDiv: "floordiv", _pe.FloorMod: "floormod",
             _pe.Min: "min", _pe.Max: "max"}


def fold(x: Dim, var: Callable[[str], object], const: Callable[[int], object], ops: Mapping[str, Callable]) -> object:
    """``x`` rebuilt in another algebra (a solver's terms): each variable through ``var``, each
    integer through ``const``, each node through ``ops[name](a, b)`` for the names ``add``, ``sub``,
    ``mul``, ``floordiv``, ``floormod``, ``min``, ``max`` (floor semantics, as :func:`evaluate`).
    So callers reason about a formula without knowing TVM's node types; an opaque function
    (:func:`opaque`) has no algebraic form and is refused (SymbolicError)."""

    def go(e):
        if isinstance(e, int):
            return const(e)
        if isinstance(e, _pe.IntImm):
            return const(int(e.value))
        if isinstance(e, tirx.Var):
            return var(str(e.name))
        if type(e) in _FOLD_OPS:
            return ops[_FOLD_OPS[type(e)]](go(e.a), go(e.b))
        if type(e) is _pe.Cast:
            return go(e.value)
        raise SymbolicError(f"no algebraic form for {to_str(e)}")

    return go(x)


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
