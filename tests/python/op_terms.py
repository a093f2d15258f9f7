"""The terms the op tests write calls in: a 1-D mesh of ``num_workers``, plain and distributed
tensor variables, a call of a registered op, and an op's numpy reference."""

from __future__ import annotations

from distir.ir import Call, DeviceMesh, DTensorType, Placement, Range, TensorType, Var, get_op, sym

N = sym.var("n")
W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))


def T(*shape, dtype="float32"):
    return Var("t", TensorType(tuple(shape), dtype))


def D(shape, placement, dtype="float32"):
    return Var("d", DTensorType(tuple(shape), dtype, MESH, Placement.parse(placement)))


def call(name, *args, **attrs):
    return Call(get_op(name), args, attrs)


def ref(name, *xs, ctx=None, **attrs):
    op = get_op(name)
    return op.numpy(list(xs), op.full_attrs(attrs), ctx)
