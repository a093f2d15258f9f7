"""The function exporter as the emitters of ops and collectives see it.

The exporter (:mod:`distir.tvm.relax.export`) walks a function and calls an emitter for each op
(:mod:`.ops`, :mod:`.collectives`); the emitters call back into the exporter. Declaring that
interface here, owned by neither side, keeps the emitters from importing the exporter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tvm import relax

    from ...ir.expr import Call, Expr
    from ...ir.sym import Dim
    from ...ir.types import Type
    from ..errors import TvmExportError
    from .session import SessionPlan

__all__ = ["Emitter", "Exporter"]


class Exporter(Protocol):
    """What an emitter may use of the function being exported."""

    plan: SessionPlan  # the Disco session of the module: a collective's groups of workers
    in_dataflow: bool  # whether bindings go into a dataflow block now (no R.If there)
    dispatch: bool  # whether a choice by the count is made at run time (R.If; to_relax(dispatch=True))

    def value(self, e: Expr) -> relax.Expr:
        """The Relax form of an argument (a variable bound before, or a constant)."""

    def emit(self, expr: relax.Expr, name: str = "") -> relax.Var:
        """Bind ``expr`` in the function being built; a TVM refusal is an export error."""

    def dim(self, d: Dim) -> Any:
        """A distir dim as a PrimExpr of the function's own size variables (ints stay ints)."""

    def dims(self, ds) -> list:
        """:meth:`dim` of each."""

    def attr(self, v: Any) -> Any:
        """An attribute value with its dims as PrimExprs."""

    def const(self, value, dtype: str) -> relax.Expr:
        """A constant of ``dtype``."""

    def scalar(self, d: Dim, dtype: str = "int64") -> relax.Expr:
        """A 0-d tensor holding ``d``, which may depend on the worker id."""

    def relax_type(self, t: Type) -> relax.Type:
        """The Relax type of a distir type."""

    def choose(self, arms, otherwise) -> relax.Expr:
        """``R.If`` on each ``(condition, build)`` arm in turn (a boolean PrimExpr of the sizes; ``build()``
        emits the branch and returns its value), else ``otherwise()``: a choice made at run time."""

    def error(self, msg: str) -> TvmExportError:
        """An export error naming the binding being emitted."""


#: an op's emitter: ``(exporter, call) -> relax.Expr`` (``RelaxForm.emit`` names one)
Emitter = Callable[[Exporter, "Call"], "relax.Expr"]
