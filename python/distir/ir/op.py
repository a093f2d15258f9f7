"""The op registry: one declaration per op gathers everything distir knows about it.

An :class:`OpDef` holds the op's script name (``"matmul"``, ``"nn.softmax"``,
``"dist.redistribute"``), its parameters (which are arguments, which are attributes,
their kinds and defaults), its type inference, its sharding rule (for propagation and
for typing DTensor inputs), its local-view lowering, its numpy reference, its TVM Relax
form (:class:`RelaxForm`, used by :mod:`distir.tvm`) and what docs/ops.md says about it
(``doc``, ``category``, :class:`ShardingDoc`). Ops are declared in :mod:`distir.ops`;
adding an op means writing one declaration there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import DistirError, TypeInferenceError
from . import sym
from .types import DTensorType, TensorType, TupleType, Type

REQUIRED = object()

ARG_KINDS = ("tensor", "tuple", "shape", "prim")
ATTR_KINDS = (
    "int",
    "float",
    "bool",
    "str",
    "dtype",
    "optional_dtype",
    "axes",  # None, an int, or a list of ints
    "ints",  # a list of ints
    "floats",  # a list of numbers (R.image.resize2d's roi)
    "dims",  # a list of ints / symbolic expressions
    "dim",  # one int / symbolic expression
    "int_or_dims",  # an int, or a list of ints / symbolic expressions (R.split's indices_or_sections)
    "mesh",  # a device mesh of the module ("mesh[0]")
    "placement",  # "S[0], R"
    "choice",  # one of Param.choices
    "scalar",  # int or float
)


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()

    @property
    def is_arg(self) -> bool:
        return self.kind in ARG_KINDS

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class RelaxAttr:
    """One distir attribute passed to the Relax op: ``keyword=convert(attrs[name])``.

    ``keyword`` defaults to ``name``; ``convert`` (plain Python, applied to the attribute's
    value with defaults filled in) maps distir's spelling of the value to Relax's. Sizes
    and lists of sizes become TVM expressions after the conversion.
    """

    name: str
    keyword: str = ""
    convert: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not self.keyword:
            object.__setattr__(self, "keyword", self.name)


@dataclass(frozen=True)
class RelaxForm:
    """How an op becomes TVM Relax in the export (:mod:`distir.tvm.relax.ops`).

    - ``op``: the Relax op function by its dotted name under ``tvm``
      (``"relax.op.nn.softmax"``), called with the op's arguments in order and ``attrs``
      by keyword. It is resolved on first use by :mod:`distir.tvm`, so declaring it
      imports nothing of TVM.
    - ``attrs``: the distir attributes passed (a :class:`RelaxAttr`, or just its name when
      the keyword is the same and the value needs no conversion).
    - ``emit``: for a form Relax has no single op for, a ``"module:function"`` emitter
      ``(exporter, call) -> relax.Expr``, also imported on first use; it may fall back to
      ``op``/``attrs`` (``distir.tvm.relax.ops.emit_relax_form``).
    - ``doc``: what the emitter does, for docs/ops.md (required with ``emit``).
    """

    op: str | None = None
    attrs: tuple[RelaxAttr, ...] = ()
    emit: str | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "attrs", tuple(a if isinstance(a, RelaxAttr) else RelaxAttr(a) for a in self.attrs))
        if self.op is None and self.emit is None:
            raise DistirError("a RelaxForm names a Relax op (op=...) or an emitter (emit=...)")
        if self.op is not None and not self.op.startswith("relax."):
            raise DistirError(f"RelaxForm op '{self.op}' must be a dotted name under tvm, e.g. 'relax.op.add'")
        if self.emit is not None and ":" not in self.emit:
            raise DistirError(f"RelaxForm emit '{self.emit}' must be 'module:function'")
        if self.emit is not None and not self.doc:
            raise DistirError(f"RelaxForm emit '{self.emit}' needs a doc saying what it emits")

    @classmethod
    def same_name(cls, name: str, *attrs: str | RelaxAttr) -> RelaxForm:
        """The Relax op named like the distir op (``relax.op.<name>``), passing ``attrs``."""
        return cls(f"relax.op.{name}", attrs)


@dataclass(frozen=True)
class ShardingDoc:
    """How an op shards, in words, for the tables of docs/ops.md (the rule is ``OpDef.sharding``).

    Empty fields print as a dash; ``partials`` is usually written by
    :func:`distir.ops.docgen.partials_text` from the same table the rule reads.
    """

    passes: str  # which dims pass their sharding to the output
    blocked: str = ""  # which dims must be whole
    gives_partial: str = ""  # a sharded dim the op reduces over, and the partial it leaves
    partials: str = "none"  # which partial inputs pass through, and how


@dataclass(eq=False)
class OpDef:
    """Everything about one op. See the module docstring."""

    name: str
    params: tuple[Param, ...]
    infer: Callable[[list[Type], Mapping[str, Any]], Type]
    numpy: Callable | None = None
    sharding: Callable | None = None  # (tensor input types, attrs, output types) -> ShardingRule
    # (global-view call, its local args, local output type, lowering) -> the call one worker runs;
    # the global call gives the hook its inputs' placements (e.g. to offset by the worker's
    # block), and ``lowering.bind(hint, call)`` writes a binding before it when one op is not enough
    localize: Callable | None = None
    # whether ``localize`` handles strided shards (docs/strided.md); an op with a local form of its
    # own that does not (it offsets by where a worker's block starts) refuses them in its type rule
    localize_strided: bool = False
    dist_aware: bool = False  # infer() handles DTensor inputs itself
    doc: str = ""  # one line, for docs/ops.md
    relax: RelaxForm | None = None  # its TVM Relax form (None: none, or a collective's step says it)
    category: str = ""  # its table in docs/ops.md ("elementwise", ...); dist.*/ccl.* ops go by prefix
    sharding_doc: ShardingDoc | None = None  # how it shards, in words (docs/ops.md)
    step: Any = None  # the StepKind (distir.ir.steps) when the op is a redistribution step or its collective
    # (call) -> True when the call changes nothing at its sizes (an uneven split's padding mask once the
    # count divides): specialize then drops it
    identity_at: Callable | None = None

    def __repr__(self) -> str:
        return f"Op(R.{self.name})"

    @property
    def arg_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_arg)

    @property
    def attr_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_arg)

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def full_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for p in self.attr_params:
            if p.name in attrs:
                out[p.name] = attrs[p.name]
            elif not p.required:
                out[p.name] = p.default
            else:
                raise TypeInferenceError(f"R.{self.name} needs the attribute '{p.name}'")
        return out

    def infer_type(self, args: Sequence, attrs: Mapping[str, Any]) -> Type:
        arg_types = [a.type for a in args]
        return self.infer_from_types(arg_types, attrs)

    def infer_from_types(self, arg_types: list[Type], attrs: Mapping[str, Any]) -> Type:
        """The type of this op's result on inputs of ``arg_types``: a function of the types and
        attrs alone, so a result is remembered (:data:`_INFERRED`; the layers of a model repeat
        the same calls)."""
        key = call_key(self, arg_types, attrs)
        if key is not None:
            hit = _INFERRED.get(key)
            if hit is not None:
                return hit
        full = self.full_attrs(attrs)
        if self.dist_aware or not any(has_dtensor(t) for t in arg_types):
            out = self.infer(arg_types, full)
        else:
            from .sharding import infer_dtensor_output

            out = infer_dtensor_output(self, arg_types, full)
        if key is not None:
            if len(_INFERRED) >= _INFERRED_LIMIT:
                _INFERRED.clear()
            _INFERRED[key] = out
        return out


# (op, argument types, attrs) -> the result type (failures are not kept: their
# message may name the call)
_INFERRED: dict[tuple, Type] = {}
_INFERRED_LIMIT = 1 << 15


def call_key(op: OpDef, arg_types: Sequence[Type], attrs: Mapping[str, Any]) -> tuple | None:
    """A hashable key of ``op`` applied to values of ``arg_types`` with ``attrs`` (what its type and
    sharding rule depend on), or None where an attr or type cannot be keyed."""
    hit = _FROZEN_ATTRS.get(id(attrs))
    if hit is not None and hit[0] is attrs:
        frozen = hit[1]
    else:
        try:
            frozen = tuple(sorted((k, _frozen(v)) for k, v in attrs.items()))
            hash(frozen)
        except TypeError:
            frozen = None
        if isinstance(attrs, MappingProxyType):  # a call's own (immutable) attrs: calls rebuilt from one binding share them
            if len(_FROZEN_ATTRS) >= _INFERRED_LIMIT:
                _FROZEN_ATTRS.clear()
            _FROZEN_ATTRS[id(attrs)] = (attrs, frozen)
    if frozen is None:
        return None
    try:
        key = (op, tuple(arg_types), frozen)
        hash(key)
    except TypeError:
        return None
    return key


_FROZEN_ATTRS: dict[int, tuple[Mapping, tuple | None]] = {}  # id(attrs) -> (attrs, their key)


def _frozen(v: Any):
    """``v`` as a hashable key that tells apart values Python calls equal across types (1, 1.0, True)."""
    if isinstance(v, (list, tuple)):
        return ("seq", tuple(_frozen(x) for x in v))
    if isinstance(v, Mapping):
        return ("map", tuple(sorted((k, _frozen(x)) for k, x in v.items())))
    if sym.is_symbolic(v):
        return sym.key(v)
    return (type(v).__name__, v)


def has_dtensor(t: Type) -> bool:
    if isinstance(t, DTensorType):
        return True
    if isinstance(t, TupleType):
        return any(has_dtensor(f) for f in t.fields)
    return False


def tensor_inputs(arg_types: Sequence[Type]) -> list[Type]:
    """Tensor-typed inputs in order, with tuple arguments flattened (for concat)."""
    out: list[Type] = []
    for t in arg_types:
        if isinstance(t, (TensorType, DTensorType)):
            out.append(t)
        elif isinstance(t, TupleType):
            out.extend(tensor_inputs(t.fields))
    return out


_REGISTRY: dict[str, OpDef] = {}

# The package that declares the built-in ops and step kinds when imported. The IR names it only as
# text and loads it on the first look-up (as the printer is loaded on the first print), so that
# ``import distir`` alone is enough for the builder and every API above it, while ``import distir``
# and the CLI's ``--help`` stay free of it (it imports numpy and TVM's arithmetic).
DECLARATIONS_PACKAGE = "distir.ops"
_DECLARED = [False]


def ensure_declared() -> None:
    """Import :data:`DECLARATIONS_PACKAGE` once (it fills this registry and the step kinds')."""
    if not _DECLARED[0]:
        _DECLARED[0] = True  # first: its own look-ups while it imports must not import it again
        import importlib

        try:
            importlib.import_module(DECLARATIONS_PACKAGE)
        except BaseException:
            _DECLARED[0] = False
            raise


def register_op(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise DistirError(f"op R.{op.name} is declared twice")
    names = [p.name for p in op.params]
    if len(set(names)) != len(names):
        raise DistirError(f"op R.{op.name} repeats a parameter name")
    if op.relax is not None:
        attrs = {p.name for p in op.attr_params}
        for a in op.relax.attrs:
            if a.name not in attrs:
                raise DistirError(f"op R.{op.name}: its Relax form passes '{a.name}', which is not one of its attributes")
    _REGISTRY[op.name] = op
    return op


def unregister_op(name: str) -> None:
    """Remove an op (for tests that declare an op of their own)."""
    _REGISTRY.pop(name)


def get_op(name: str) -> OpDef | None:
    """The op called ``name`` (``"matmul"``, ``"nn.softmax"``), or None.

    The registry holds the ops that have been declared: importing :mod:`distir.ops` declares
    them all; it is imported on the first look-up (:func:`ensure_declared`)."""
    if not _DECLARED[0]:
        ensure_declared()
    return _REGISTRY.get(name)


def all_ops() -> dict[str, OpDef]:
    if not _DECLARED[0]:
        ensure_declared()
    return dict(_REGISTRY)
