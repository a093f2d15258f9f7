"""Models written with ``tvm.relax.frontend.nn``: import them, and cut their weights per worker.

- :func:`from_nn`: ``model.export_tvm(spec)``, then :func:`distir.tvm.from_relax`; each
  function keeps TVM's ``num_input`` attribute (the parameters after the inputs are the
  weights) and records the weights' dotted names (``layers.0.mlp.down_proj.weight``) in
  ``distir.param_names``, so ``ShardParams`` patterns and weights given by name use them.
- :func:`shard_weights`: every worker's block of every weight of a distributed (local-view)
  module, written to one ``.npz`` per worker, as MLC-LLM pre-shards its weights.

See docs/frontend.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tvm import relax

from ..ir import sym
from ..ir.expr import Function, IRModule
from ..ir.layout import concrete_mesh_shape, concrete_placement, cut_block, local_shape, mesh_coords
from ..ir.types import DTensorType
from ..transform.lower_to_local import GLOBAL_PARAMS
from ..transform.weights import NUM_INPUT, PARAM_NAMES, param_names, weight_arguments
from .errors import TvmImportError, tvm_message
from .importer import from_relax

__all__ = ["from_nn", "shard_weights"]


def from_nn(model: Any, spec: Mapping[str, Any]) -> IRModule:
    """The distir module of ``model`` (a ``tvm.relax.frontend.nn.Module``) exported with ``spec``.

    ``spec`` is ``export_tvm``'s: ``{"forward": {"ids": nn.spec.Tensor(["s"], "int32")}}``.
    Weights must be passed as plain parameters (``param_mode`` "plain", the default);
    functions keep their names (``forward``). Raises TvmImportError for what distir cannot
    import (an op it does not know is named with its binding).
    """
    from tvm.relax.frontend import nn

    if not isinstance(model, nn.Module):
        raise TvmImportError(f"from_nn takes a tvm.relax.frontend.nn.Module, got {type(model).__name__}")
    try:
        exported, params = model.export_tvm(spec)
    except Exception as err:  # noqa: BLE001 - TVM raises many error types while tracing a model
        raise TvmImportError(f"nn.Module.export_tvm failed: {type(err).__name__}: {tvm_message(err)}") from None
    names = [str(n) for n, _ in params]
    for gv, f in exported.functions.items():
        if not isinstance(f, relax.Function):
            continue
        n_in = f.attrs.get(NUM_INPUT) if f.attrs is not None else None
        if n_in is None:
            raise TvmImportError(f"@{gv.name_hint} has no '{NUM_INPUT}' attribute; from_nn imports what export_tvm makes")
        extra = len(f.params) - int(n_in)
        if extra != len(names):
            raise TvmImportError(
                f"@{gv.name_hint} takes {extra} parameters after its {int(n_in)} inputs, but the model has "
                f"{len(names)} weights; export with the weights as plain parameters (param_mode 'plain')"
            )
    mod = from_relax(exported)
    funcs = {}
    for fname, func in mod.functions.items():
        n_in = int(func.attrs[NUM_INPUT])
        inputs = [p.name for p in func.params[:n_in]]
        for name, p in zip(names, func.params[n_in:]):
            if p.name not in (name, name.replace(".", "_")):
                raise TvmImportError(
                    f"@{fname}: weight '{name}' is parameter '{p.name}'; export the weights as plain parameters "
                    "in their order (param_mode 'plain')"
                )
        funcs[fname] = func.replace(attrs={**func.attrs, PARAM_NAMES: inputs + names})
    return mod.replace(functions=funcs)


def _weights_function(mod: IRModule, func: str | None) -> Function:
    if func is not None:
        return mod[func]
    with_weights = [f for f in mod.functions.values() if NUM_INPUT in f.attrs]
    if len(with_weights) != 1:
        raise TvmImportError(
            f"the module has {len(with_weights)} functions with weights ('{NUM_INPUT}' attribute); name one with func="
        )
    return with_weights[0]


def shard_weights(
    local_mod: IRModule,
    weights: Sequence[Any] | Mapping[str, Any],
    num_workers: int,
    out_dir: str | os.PathLike,
    *,
    func: str | None = None,
    symbol: str = "num_workers",
) -> list[Path]:
    """Write every worker's block of every weight to ``out_dir/worker_<k>.npz``; the paths.

    ``local_mod`` is the distributed module (after the distribute pipeline, ``symbol``
    symbolic or specialized); ``weights`` the model's global weights (a list in parameter
    order, a name -> array mapping, or ``export_tvm``'s ``params`` with data). Worker ``k``'s
    archive holds, under each weight's name, the block it is given at run time: the whole
    weight when replicated, its block of ``ceil(n / num_workers)`` rows or columns when
    sharded (the last blocks zero-padded when the split is uneven), zeros when the weight's
    mesh does not hold the worker. A partial weight has no blocks and is refused.
    """
    f = _weights_function(local_mod, func)
    if GLOBAL_PARAMS not in f.attrs:
        raise TvmImportError(f"@{f.name} is not distributed yet; run the distribute pipeline first")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise TvmImportError(f"num_workers must be a positive integer, got {num_workers!r}")
    n_in = int(f.attrs[NUM_INPUT])
    types = list(f.attrs[GLOBAL_PARAMS])
    placeholders = [np.empty(0)] * n_in  # weight_arguments checks the weights only
    arrays = weight_arguments(f, placeholders, weights)[n_in:]
    names = param_names(f)[n_in:]
    values = {symbol: int(num_workers)}
    meshes = [t.mesh for t in types if isinstance(t, DTensorType)]
    total = max([max(m.device_list(values)) + 1 for m in meshes], default=1)  # Disco's session: every id
    per_worker: list[dict[str, np.ndarray]] = [{} for _ in range(total)]
    for name, t, a in zip(names, types[n_in:], arrays):
        if not isinstance(t, DTensorType):
            for w in range(total):
                per_worker[w][name] = a
            continue
        if t.placement.has_partial:
            raise TvmImportError(f"weight '{name}' is laid out {t.placement}, a partial value: it has no blocks to write")
        sizes = concrete_mesh_shape(t.mesh, values)
        devices = t.mesh.device_list(values)
        for pos, dev in enumerate(devices):
            per_worker[dev][name] = cut_block(a, concrete_placement(t.placement, values), mesh_coords(pos, sizes), sizes)
        local = tuple(sym.evaluate(d, values) for d in local_shape(t.shape, t.mesh, t.placement))
        for w in range(total):
            per_worker[w].setdefault(name, np.zeros(local, dtype=a.dtype))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for w, arrays_w in enumerate(per_worker):
        path = out / f"worker_{w}.npz"
        np.savez(path, **arrays_w)
        paths.append(path)
    return paths
