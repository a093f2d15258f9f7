"""The distir IR: types, meshes, placements, expressions, modules, the op registry."""

from . import sym
from .expr import (
    Binding,
    Block,
    Call,
    Constant,
    Expr,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from .mesh import DeviceMesh, MeshError, Range
from .op import OpDef, Param, all_ops, get_op, register_op
from .placement import Partial, Placement, PlacementError, Replicate, Shard
from .sharding import ShardingRule
from .types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .verify import collect_problems, verify  # eager: a lazy wrapper named like the submodule gets shadowed by it

__all__ = [
    "sym",
    "Binding", "Block", "Call", "Constant", "Expr", "Function", "IRModule", "PrimValue", "ShapeExpr",
    "StringImm", "Tuple", "TupleGetItem", "Var",
    "DeviceMesh", "MeshError", "Range",
    "OpDef", "Param", "all_ops", "get_op", "register_op",
    "Partial", "Placement", "PlacementError", "Replicate", "Shard", "ShardingRule",
    "DTensorType", "PrimType", "ShapeType", "TensorType", "TupleType", "Type",
    "verify", "collect_problems", "structural_equal", "assert_structural_equal",
]


def structural_equal(a, b) -> bool:
    from .structural import structural_equal as _se

    return _se(a, b)


def assert_structural_equal(a, b) -> None:
    from .structural import assert_structural_equal as _ase

    return _ase(a, b)
