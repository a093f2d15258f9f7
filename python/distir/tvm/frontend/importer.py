"""Import a TVM Relax module that uses TVM's DistIR (``R.dist``) into distir.

Meshes come from ``global_infos["mesh"]``; ``R.DTensor`` parameters and results keep
their mesh and placement; ``R.dist.annotate_sharding`` and ``R.dist.redistribute`` map
to the distir ops of the same name, and ``R.dist.redistribute_replica_to_shard`` to a
redistribute to ``S[axis]``. Every other op must be a distir op of the same name
(``relax.nn.softmax`` -> ``nn.softmax``); an unknown op is an error naming it and the
binding, and so is a call of code distir cannot look into (``R.call_tir`` of a TIR
function, as ``nn.op.tensor_expr_op`` emits, or a packed function).

distir infers every binding's type itself. TVM's DistIR has no partial placement: it
types a matmul that contracts a sharded dim as replicated, the all-reduce being implied.
Where TVM's recorded placement differs from distir's, the importer adds the
``R.dist.redistribute`` that makes it explicit, so the imported module means what the
TVM one does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ... import (
    ops,  # noqa: F401  (declares every op, which the imported calls name)
    script,  # noqa: F401  (the text format, so that imported modules print)
)
from ...errors import DistirError
from ...ir import sym
from ...ir.expr import (
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
from ...ir.mesh import DeviceMesh, Range
from ...ir.op import OpDef, get_op
from ...ir.placement import Placement
from ...ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from ..errors import TvmImportError

__all__ = ["from_relax"]

def from_relax(tvm_mod: tvm.IRModule) -> IRModule:
    """The distir form of a TVM Relax module using ``R.dist`` (module docstring)."""
    return _Importer(tvm_mod).run()


# Relax calls of code distir cannot see into: it could neither shard them nor run them on one device.
_OPAQUE_CALLS = ("call_tir", "call_tir_inplace", "call_tir_with_grad", "call_dps_packed", "call_pure_packed",
                 "call_inplace_packed")


def _opaque_call_message(short: str, e) -> str:
    callee = e.args[0] if len(e.args) else None
    name = getattr(callee, "name_hint", None) or getattr(callee, "global_symbol", None) or str(callee)
    if short.startswith("call_tir"):
        emitters = "nn.op.tensor_ir_inplace_op emits" if short == "call_tir_inplace" else \
            "nn.op.tensor_expr_op and nn.op.tensor_ir_op emit"
        what = (f"R.{short} of the TIR function '{name}' (as {emitters}): "
                "distir cannot see inside TIR, so it can neither shard it nor run it on one device")
    else:
        what = f"R.{short} of the packed function '{name}': distir cannot see inside it"
    return what + "; write the computation with Relax ops (nn.op.*) instead"


_HAND_SHARDED = ("a collective of a hand-sharded program; write the single-device model and let a shard plan "
                 "(ShardParams) place the collectives")
# Relax ops distir has no counterpart for that nn.op functions emit: the function, and what to write instead.
_NO_COUNTERPART = {
    "builtin.alloc_tensor": ("nn.op.empty", "an uninitialised tensor has no value to compare; use nn.op.zeros"),
    "ccl.allreduce": ("nn.op.ccl_allreduce", _HAND_SHARDED),
    "ccl.allgather": ("nn.op.ccl_allgather", _HAND_SHARDED),
    "ccl.broadcast_from_worker0": ("nn.op.ccl_broadcast_from_worker0", _HAND_SHARDED),
    "nn.conv1d_transpose": ("nn.op.conv1d_transpose", "a transposed convolution is not modelled; upsample with "
                            "nn.op.interpolate (or nn.op.repeat) and use nn.op.conv1d"),
    "nn.conv2d_transpose": ("nn.Conv2DTranspose", "a transposed convolution is not modelled; upsample with "
                            "nn.op.interpolate and use nn.op.conv2d"),
    "multinomial_from_uniform": ("nn.op.multinomial_from_uniform", "sampling is not modelled; return the "
                                 "probabilities (nn.op.softmax) and sample outside the model"),
}


def _no_counterpart_message(name: str) -> str:
    short = name.removeprefix("relax.")
    if short in _NO_COUNTERPART:
        fn, advice = _NO_COUNTERPART[short]
        return f"TVM op {name} (from {fn}) has no distir counterpart: {advice}"
    return (f"TVM op {name} has no distir counterpart: write it with the nn.op functions distir imports "
            "(the table of docs/frontend.md), or declare an OpDef for it in distir/ops (docs/ops.md)")


#: ops whose flags TVM 0.27's LegalizeOps ignores (docs/frontend.md): an import with one off is refused
_AFFINE_FLAGS = {"nn.layer_norm": ("center", "scale"), "nn.group_norm": ("center", "scale")}


def _attr_fields(attrs) -> set[str]:
    """The field names of a TVM attributes object (its type's, its ancestors' included)."""
    names: set[str] = set()
    info = getattr(type(attrs), "__tvm_ffi_type_info__", None) if attrs is not None else None
    while info is not None:
        names.update(f.name for f in info.fields)
        info = info.parent_type_info
    return names


def _last_line(err: Exception) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


def _python_value(v) -> Any:
    """A TVM attribute value (containers, immediates, strings) as plain Python."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tvm.tirx.IntImm):
        return bool(v.value) if str(v.ty) == "bool" else int(v.value)
    if isinstance(v, tvm.tirx.FloatImm):
        return float(v.value)
    if hasattr(v, "items"):
        return {str(k): _python_value(x) for k, x in v.items()}
    if hasattr(v, "__len__"):
        return [_python_value(x) for x in v]
    return str(v)


class _Importer:
    def __init__(self, tvm_mod: tvm.IRModule):
        self.tvm_mod = tvm_mod
        infos = tvm_mod.global_infos
        self.tvm_meshes = list(infos["mesh"]) if "mesh" in infos else []
        self.meshes = [self.mesh(m) for m in self.tvm_meshes]
        self.where = ""

    def fail(self, msg: str) -> TvmImportError:
        return TvmImportError(f"{self.where}: {msg}" if self.where else msg)

    # ------------------------------------------------------------ leaves

    def dim(self, e) -> sym.Dim:
        """A TVM PrimExpr as a distir dim (symbolic variables interned by name)."""
        try:
            return sym.from_tvm(e)
        except sym.SymbolicError as err:
            raise self.fail(f"unsupported size expression {e} ({err})") from None

    def mesh(self, m) -> DeviceMesh:
        shape = tuple(int(s) for s in m.shape)
        rng = m.device_range
        if rng is not None:
            start = int(rng.min)
            ids: Any = Range(start, start + int(rng.extent))
        else:
            ids = tuple(int(i) for i in m.device_ids)
        return DeviceMesh(shape, ids)

    def mesh_of(self, m) -> DeviceMesh:
        for tm, dm in zip(self.tvm_meshes, self.meshes):
            if tvm_ffi.structural_equal(tm, m):  # not same_as: GlobalInfo.same_as recurses forever in 0.27
                return dm
        return self.mesh(m)

    def placement(self, p) -> Placement:
        return Placement.parse(str(p).strip('"'))

    def type(self, t) -> Type:
        from tvm.relax.distributed import DTensorType as TvmDTensor

        if isinstance(t, TvmDTensor):
            tensor = self.type(t.tensor_ty)
            return DTensorType(tensor.shape, tensor.dtype, self.mesh_of(t.device_mesh), self.placement(t.placement))
        if isinstance(t, relax.TensorType):
            shape = t.shape
            if not isinstance(shape, relax.ShapeExpr):
                raise self.fail(f"tensor type {t} has no known shape; distir needs every tensor's shape")
            return TensorType(tuple(self.dim(d) for d in shape.values), str(t.dtype))
        if isinstance(t, relax.ShapeType):
            values = None if t.values is None else tuple(self.dim(d) for d in t.values)
            return ShapeType(t.ndim if values is None else len(values), values)
        if isinstance(t, tvm.ir.TupleType):
            return TupleType(tuple(self.type(f) for f in t.fields))
        if isinstance(t, tvm.ir.PrimType):
            return PrimType(str(t.dtype))
        raise self.fail(f"distir has no type like TVM's {t}")

    # ------------------------------------------------------------ expressions

    def expr(self, e, env: dict) -> Expr:
        if isinstance(e, relax.Var):
            try:
                return env[e]
            except KeyError:
                raise self.fail(f"'{e.name}' is used before it is defined") from None
        if isinstance(e, tvm.ir.expr.Constant):
            data = e.value.numpy() if hasattr(e.value, "numpy") else np.asarray(e.value)
            return Constant(np.asarray(data))
        if isinstance(e, relax.ShapeExpr):
            return ShapeExpr(tuple(self.dim(v) for v in e.values))
        if isinstance(e, tvm.ir.expr.Tuple):
            return Tuple(tuple(self.expr(f, env) for f in e.fields))
        if isinstance(e, tvm.ir.expr.TupleGetItem):
            return TupleGetItem(self.expr(e.tuple_value, env), int(e.index))
        if isinstance(e, tvm.ir.expr.StringImm):
            return StringImm(str(e.value))
        if tvm.ir.is_prim_expr(e):
            return PrimValue(self.dim(e), str(e.ty))
        raise self.fail(f"distir cannot import {type(e).__name__} values")

    def attr_value(self, v, kind: str) -> Any:
        if v is None:
            return None
        if kind == "mesh":
            return self.mesh_of(v)
        if kind == "placement":
            return self.placement(v)
        if kind in ("dtype", "optional_dtype"):
            text = str(v)
            return None if text in ("", "void") else text
        if isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, tvm.tirx.IntImm):
            return bool(v.value) if str(v.ty) == "bool" else int(v.value)
        if isinstance(v, tvm.tirx.FloatImm):
            return float(v.value)
        if isinstance(v, relax.ShapeExpr):
            return [self.dim(x) for x in v.values]
        if isinstance(v, tvm.ir.expr.Tuple):
            return [self.attr_value(x, kind) for x in v.fields]
        if tvm.ir.is_prim_expr(v):
            return self.dim(v)
        if hasattr(v, "__len__") and not isinstance(v, str):
            return [self.attr_value(x, kind) for x in v]
        return str(v)

    def call(self, e, env: dict, in_mesh: DeviceMesh | None) -> Call:
        name = str(e.op.name)
        short = name.removeprefix("relax.")
        if short == "dist.redistribute_replica_to_shard":
            return self.replica_to_shard(e, env)
        if short in _OPAQUE_CALLS:
            raise self.fail(_opaque_call_message(short, e))
        op = get_op(short)
        if op is None:
            raise self.fail(_no_counterpart_message(name))
        args, attrs = self.call_operands(op, e, env, name)
        off = [k for k in _AFFINE_FLAGS.get(short, ()) if attrs.get(k) is False]
        if off:  # TVM computes these with gamma and beta anyway; distir would not: refused, never a different number
            raise self.fail(f"{name} has {' and '.join(f'{k}=False' for k in off)}, which TVM 0.27 ignores (it applies "
                            f"gamma and beta whatever the flags say) and distir honours: the imported module would compute "
                            f"differently from TVM's; pass the flags as True (with ones for gamma, zeros for beta)")
        try:
            call = Call(op, tuple(args), attrs)
            call.type  # noqa: B018 - type it now, to report a problem here
        except DistirError as err:
            raise self.fail(f"{name}: {err}") from None
        return call

    def call_operands(self, op: OpDef, e, env: dict, name: str) -> tuple[list[Expr], dict[str, Any]]:
        """distir args and attrs of TVM call ``e``: args by position, attrs by name or by position."""
        tvm_args = list(e.args)
        tvm_attrs = e.attrs
        attr_names = set() if tvm_attrs is None else {k for k in dir(tvm_attrs) if not k.startswith("_")}
        args: list[Expr] = []
        attrs: dict[str, Any] = {}
        pos = 0
        for p in op.params:
            if p.is_arg:
                if pos >= len(tvm_args):
                    if p.required:
                        raise self.fail(f"{name} has {len(tvm_args)} arguments; distir's R.{op.name} needs '{p.name}'")
                    continue
                args.append(self.expr(tvm_args[pos], env))
                pos += 1
            elif p.name in attr_names:
                attrs[p.name] = self.attr_value(getattr(tvm_attrs, p.name), p.kind)
            elif pos < len(tvm_args) and p.kind not in ("mesh", "placement"):
                attrs[p.name] = self.attr_value(tvm_args[pos], p.kind)  # Relax passes some attributes as arguments
                pos += 1
        if pos < len(tvm_args):
            raise self.fail(f"{name} has {len(tvm_args)} arguments; distir's R.{op.name} takes {pos}")
        unknown = sorted(_attr_fields(tvm_attrs) - {p.name for p in op.params})
        if unknown:  # dropping an attribute could change what the op computes
            values = ", ".join(f"{k}={_python_value(getattr(tvm_attrs, k))!r}" for k in unknown)
            raise self.fail(f"{name} has attribute{'s' if len(unknown) > 1 else ''} {values} that distir's R.{op.name} lacks")
        return args, attrs

    def replica_to_shard(self, e, env: dict) -> Call:
        x = self.expr(e.args[0], env)
        t = x.type
        if not isinstance(t, DTensorType) or t.mesh.ndim != 1:
            raise self.fail("relax.dist.redistribute_replica_to_shard is imported for tensors on a 1-D mesh only")
        n, axis = int(e.attrs.num_workers), int(e.attrs.axis)
        if not sym.equal(t.mesh.shape[0], n):
            raise self.fail(f"redistribute_replica_to_shard over {n} workers, but the mesh has {sym.to_str(t.mesh.shape[0])}")
        placement = Placement.parse(f"S[{axis}]")
        return Call(get_op("dist.redistribute"), (x,), {"device_mesh": t.mesh, "placement": placement})

    # ------------------------------------------------------------ functions

    def function(self, name: str, f) -> Function:
        self.where = f"@{name}"
        env: dict = {}
        params = []
        for p in f.params:
            v = Var(str(p.name), self.type(p.ty))
            env[p] = v
            params.append(v)
        blocks = []
        body = f.body
        if not isinstance(body, relax.SeqExpr):
            raise self.fail("the function body is not a sequence of binding blocks")
        for block in body.blocks:
            bindings: list[Binding] = []
            outputs: list[Var] = []
            is_dataflow = isinstance(block, relax.DataflowBlock)
            for b in block.bindings:
                self.where = f"@{name}, binding '{b.var.name}'"
                if not isinstance(b, relax.VarBinding):
                    raise self.fail(f"distir has no {type(b).__name__} (only plain bindings)")
                new = self.binding(b, env)
                bindings.extend(new)
                if is_dataflow and not isinstance(b.var, relax.DataflowVar):
                    outputs.append(new[-1].var)
            blocks.append(Block(tuple(bindings), is_dataflow, tuple(outputs) if is_dataflow else None))
        self.where = f"@{name}"
        result = self.expr(body.body, env)
        ret = self.type(f.ret_ty) if getattr(f, "ret_ty", None) is not None else None
        attrs = {str(k): _python_value(v) for k, v in (f.attrs.items() if f.attrs is not None else ())}
        # TVM marks a public function by its global symbol (its name unless given otherwise)
        if attrs.get("global_symbol") == name:
            del attrs["global_symbol"]
        elif "global_symbol" not in attrs:
            attrs["private"] = True
        if not f.is_pure:
            attrs["pure"] = False
        return Function(name, tuple(params), tuple(blocks), result, ret, attrs)

    def binding(self, b, env: dict) -> list[Binding]:
        v = b.value
        name = str(b.var.name)
        if isinstance(v, tvm.ir.expr.Call) and isinstance(v.op, tvm.ir.Op):
            value: Expr = self.call(v, env, None)
        elif isinstance(v, tvm.ir.expr.Call):
            raise self.fail(f"calls to {v.op} are not imported (only Relax ops)")
        else:
            value = self.expr(v, env)
        try:
            have = value.type
        except DistirError as err:
            raise self.fail(str(err)) from None
        want = self.type(b.var.ty)
        out = []
        if isinstance(want, DTensorType) and isinstance(have, DTensorType) and have != want:
            if have.tensor != want.tensor:
                raise self.fail(f"TVM types it {want}, distir {have}")
            # TVM's DistIR leaves this step implicit (e.g. the all-reduce after a sharded contraction)
            inner = Var(name + "_local", have)
            out.append(Binding(inner, value))
            value = Call(get_op("dist.redistribute"), (inner,), {"device_mesh": want.mesh, "placement": want.placement})
            have = value.type
        elif type(have) is not type(want) or (isinstance(have, TensorType) and have != want):
            raise self.fail(f"TVM types it {want}, distir {have}")
        var = Var(name, have)
        env[b.var] = var
        out.append(Binding(var, value))
        return out

    def run(self) -> IRModule:
        funcs = {}
        others = []
        for gv, f in self.tvm_mod.functions.items():
            name = str(gv.name_hint)
            if not isinstance(f, relax.Function):
                others.append((name, f))
                continue
            funcs[name] = self.function(name, f)  # a call of another function is reported here, with its binding
        for name, f in others:
            raise TvmImportError(f"@{name} is a {type(f).__name__}; distir imports Relax functions only")
        infos = {"mesh": self.meshes} if self.meshes else {}
        attrs = self.tvm_mod.attrs
        return IRModule(funcs, infos, {str(k): _python_value(v) for k, v in (attrs.items() if attrs is not None else ())})
