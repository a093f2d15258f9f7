"""Byte counts as formulas in the mesh sizes: exact quotients and maxima over symbolic ints.

Most counts are plain :data:`~distir.ir.sym.Dim` values (ints or TVM PrimExprs, handled by
:mod:`distir.ir.sym`). Two shapes of formula need more:

- bytes *per worker* of an all-reduce are ``2 * (n - 1) * L / n``, which is not an integer
  at every ``n`` (three workers sharing 4 bytes), so :class:`Rational` keeps exact quotients
  and evaluates to a :class:`~fractions.Fraction`;
- the peak of live memory is the largest of several sums that no prover can order for
  every ``n`` (``65536 // n`` against ``32768``), so :class:`Maximum` keeps the candidates
  and evaluates to the largest.

Every formula here evaluates with :func:`evaluate` and prints with :func:`to_str`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from ..ir import sym
from ..ir.sym import Dim
from .errors import AnalysisError

__all__ = ["Formula", "Maximum", "Rational", "evaluate", "free_vars", "sum_dims", "to_str"]


def sum_dims(dims: Iterable[Dim]) -> Dim:
    """The sum of many dims, simplified once: equal terms are counted, not re-simplified."""
    counts: dict = {}
    reps: dict = {}
    const = 0
    for d in dims:
        if isinstance(d, int):
            const += d
            continue
        k = sym.key(d)
        counts[k] = counts.get(k, 0) + 1
        reps.setdefault(k, d)
    if not counts:
        return const
    total = sym.to_prim(const)
    for k, c in counts.items():
        total = total + (reps[k] if c == 1 else reps[k] * c)
    return sym.normalize(total)


@dataclass(frozen=True)
class Rational:
    """A sum of exact quotients ``num / den`` (one term per distinct denominator)."""

    terms: tuple[tuple[Dim, Dim], ...] = ()

    @staticmethod
    def of(num: Dim, den: Dim = 1) -> Rational:
        """``num / den``, as an integer formula when ``den`` provably divides ``num``."""
        num, den = sym.normalize(num), sym.normalize(den)
        if isinstance(den, int) and den == 1:
            return Rational(((num, 1),))
        if sym.prove_divisible(num, den):
            return Rational(((sym.floordiv(num, den), 1),))
        return Rational(((num, den),))

    def __add__(self, other: Rational) -> Rational:
        return Rational.sum([self, other])

    @staticmethod
    def sum(items: Iterable[Rational]) -> Rational:
        nums: dict = {}
        dens: dict = {}
        for r in items:
            for num, den in r.terms:
                k = sym.key(den)
                dens.setdefault(k, den)
                nums.setdefault(k, []).append(num)
        terms = []
        for k, den in dens.items():
            num = sum_dims(nums[k])
            if not (isinstance(num, int) and num == 0):
                terms.append((num, den))
        terms.sort(key=lambda t: (not isinstance(t[1], int), sym.to_str(t[1])))
        return Rational(tuple(terms))

    @property
    def is_integral(self) -> bool:
        return all(isinstance(d, int) and d == 1 for _, d in self.terms)

    def evaluate(self, values: Mapping[str, int]) -> Fraction:
        total = Fraction(0)
        for num, den in self.terms:
            total += Fraction(_eval(num, values), _eval(den, values))
        return total

    def free_vars(self) -> set[str]:
        out: set[str] = set()
        for num, den in self.terms:
            out |= sym.free_vars(num) | sym.free_vars(den)
        return out

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for num, den in self.terms:
            if isinstance(den, int) and den == 1:
                parts.append(sym.to_str(num))
            else:
                n = sym.to_str(num)
                n = f"({n})" if not _is_atom(num) else n
                d = sym.to_str(den)
                d = f"({d})" if not _is_atom(den) else d
                parts.append(f"{n} / {d}")
        return " + ".join(parts)


@dataclass(frozen=True)
class Maximum:
    """The largest of ``options`` (each a Dim) at given sizes; ``labels`` say where each arises."""

    options: tuple[Dim, ...]
    labels: tuple[str, ...] = ()

    def evaluate(self, values: Mapping[str, int]) -> int:
        return max(_eval(o, values) for o in self.options) if self.options else 0

    def argmax(self, values: Mapping[str, int]) -> int:
        """Index of the option that is largest at ``values`` (the first one on ties)."""
        vals = [_eval(o, values) for o in self.options]
        return vals.index(max(vals)) if vals else -1

    def free_vars(self) -> set[str]:
        out: set[str] = set()
        for o in self.options:
            out |= sym.free_vars(o)
        return out

    def __str__(self) -> str:
        if not self.options:
            return "0"
        if len(self.options) == 1:
            return sym.to_str(self.options[0])
        return "max(" + ", ".join(sym.to_str(o) for o in self.options) + ")"


Formula = Dim | Rational | Maximum


def _is_atom(x: Dim) -> bool:
    return isinstance(x, int) or not any(ch in sym.to_str(x) for ch in " ")


def _eval(x: Dim, values: Mapping[str, int]) -> int:
    try:
        return sym.evaluate(x, values)
    except sym.SymbolicError as err:
        raise AnalysisError(f"cannot evaluate {sym.to_str(x)}: {err}; give a value for every symbolic size") from None


def evaluate(x: Formula, values: Mapping[str, int] | None = None) -> int | Fraction:
    """The number a formula takes at ``values`` (an int, or a Fraction for a Rational)."""
    values = values or {}
    if isinstance(x, (Rational, Maximum)):
        return x.evaluate(values)
    return _eval(x, values)


def to_str(x: Formula) -> str:
    return str(x) if isinstance(x, (Rational, Maximum)) else sym.to_str(x)


def free_vars(x: Formula) -> set[str]:
    return x.free_vars() if isinstance(x, (Rational, Maximum)) else sym.free_vars(x)


def prune_dominated(options: list[Dim]) -> list[int]:
    """Indices of the options not provably at most another option (sizes taken to be >= 1)."""
    names = set()
    for o in options:
        names |= sym.free_vars(o)
    keep = list(range(len(options)))
    with sym.assume_positive(names):
        for i in range(len(options)):
            if i not in keep:
                continue
            for j in keep:
                if j != i and sym.prove_le(options[i], options[j]):
                    keep.remove(i)
                    break
    return keep
