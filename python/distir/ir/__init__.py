"""The distir IR: types, meshes, placements, expressions, modules, the op registry."""

from . import sym
from .axis_cost import AxisCost, AxisCosts
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
from .op import OpDef, Param, RelaxAttr, RelaxForm, ShardingDoc, all_ops, get_op, register_op
from .placement import Partial, Placement, PlacementError, Replicate, Shard, StridedShard
from .sharding import ShardingRule
from .types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .verify import collect_problems, verify  # eager: a lazy wrapper named like the submodule gets shadowed by it

__all__ = [
    "AxisCost",
    "AxisCosts",
    "Binding",
    "Block",
    "Call",
    "Constant",
    "DTensorType",
    "DeviceMesh",
    "Expr",
    "Function",
    "IRModule",
    "MeshError",
    "OpDef",
    "Param",
    "Partial",
    "Placement",
    "PlacementError",
    "PrimType",
    "PrimValue",
    "Range",
    "RelaxAttr",
    "RelaxForm",
    "Replicate",
    "ShapeExpr",
    "ShapeType",
    "Shard",
    "ShardingDoc",
    "ShardingRule",
    "StridedShard",
    "StringImm",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "Type",
    "Var",
    "all_ops",
    "assert_structural_equal",
    "collect_problems",
    "get_op",
    "register_op",
    "structural_equal",
    "sym",
    "verify",
]


def structural_equal(a, b) -> bool:
    from .structural import structural_equal as _se

    return _se(a, b)


def assert_structural_equal(a, b) -> None:
    from .structural import assert_structural_equal as _ase

    return _ase(a, b)
