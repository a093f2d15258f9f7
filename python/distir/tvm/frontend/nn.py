"""Models written with ``tvm.relax.frontend.nn``: import them with their weights' names.

- :func:`from_nn`: ``model.export_tvm(spec)``, then :func:`distir.tvm.from_relax`; each
  function keeps TVM's ``num_input`` attribute (the parameters after the inputs are the
  weights) and records the weights' dotted names (``layers.0.mlp.down_proj.weight``) in
  ``distir.param_names``, so ``ShardParams`` patterns and weights given by name use them.
- every worker's block of the weights, pre-sharded in TVM's format: :mod:`distir.tvm.weights`.

See docs/frontend.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from ...ir.expr import IRModule
from ...transform.weights import NUM_INPUT, PARAM_NAMES
from ..errors import TvmImportError, tvm_message
from .importer import from_relax

__all__ = ["from_nn"]


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
