"""IR the tests share, made with the public builder (distir.ir.builder)."""

from __future__ import annotations

import distir.ops  # noqa: F401  (declares the ops the builder calls)
from distir.ir import DeviceMesh, IRModule, Placement
from distir.ir.builder import FunctionBuilder, dtensor, mesh, module_of


def redistribute_module(
    on: DeviceMesh | tuple,
    shape: tuple,
    src: str | Placement,
    *dsts: str | Placement,
    dtype: str = "float32",
    dst_mesh: DeviceMesh | None = None,
) -> IRModule:
    """``x`` of ``shape`` laid out ``src`` on mesh ``on`` (a mesh, or the shape of one over
    devices 0, 1, ...), redistributed to each of ``dsts`` in turn, the last onto ``dst_mesh``
    when given; returns the last. One redistribute binds ``y``, several ``y0, y1, ...``."""
    m = on if isinstance(on, DeviceMesh) else mesh(on)
    meshes = [m] if dst_mesh is None else [m, dst_mesh]
    b = FunctionBuilder("main", meshes=meshes)
    cur = b.param("x", dtensor(shape, dtype, m, src))
    with b.dataflow():
        for i, dst in enumerate(dsts):
            target = dst_mesh if dst_mesh is not None and i == len(dsts) - 1 else m
            name = "y" if len(dsts) == 1 else f"y{i}"
            cur = b.call("dist.redistribute", cur, device_mesh=target, placement=dst, name=name)
    b.ret(cur)
    return module_of(b)
