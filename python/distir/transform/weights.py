"""Parameter names and weights: which parameters of a function are a model's weights, and by what name.

A module imported from a ``tvm.relax.frontend.nn`` model (:func:`distir.tvm.from_nn`)
follows TVM's ``num_input`` convention: the function attribute ``num_input`` says how many
leading parameters are inputs; the parameters after them are the model's weights, in the
order of ``nn.Module.export_tvm``'s ``params`` list. TVM names the Relax parameters after
the weights with dots replaced (``layers_0_mlp_down_proj_weight``); the weights' own names
(``layers.0.mlp.down_proj.weight``) are kept in the function attribute
``distir.param_names``, one per parameter. Every name-based API (``ShardParams`` patterns,
weights given by name, :func:`distir.tvm.shard_weights`) reads names through
:func:`param_names`: the recorded name when there is one, else the parameter's own.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Function
from ..ir.types import DTensorType, TensorType, Type
from .lower_to_local import GLOBAL_PARAMS

__all__ = [
    "NUM_INPUT",
    "PARAM_NAMES",
    "WeightsError",
    "param_names",
    "weight_arguments",
    "weight_names",
]

NUM_INPUT = "num_input"  # TVM's attribute: the number of leading parameters that are inputs
PARAM_NAMES = "distir.param_names"  # one name per parameter (a model's dotted weight names)


class WeightsError(DistirError):
    """Weights that do not fit a function: missing or unknown names, a wrong count, shape or dtype."""


def param_names(func: Function) -> list[str]:
    """The name of every parameter: from ``distir.param_names`` when recorded, else the parameter's own."""
    recorded = func.attrs.get(PARAM_NAMES)
    if recorded is None:
        return [p.name for p in func.params]
    names = [str(n) for n in recorded]
    if len(names) != len(func.params):
        raise WeightsError(
            f"@{func.name}: attribute '{PARAM_NAMES}' has {len(names)} names for {len(func.params)} parameters"
        )
    return names


def _num_input(func: Function) -> int:
    n = func.attrs.get(NUM_INPUT)
    if n is None:
        raise WeightsError(
            f"@{func.name} has no '{NUM_INPUT}' attribute, so none of its parameters is a weight; "
            "pass every argument as an input"
        )
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= len(func.params):
        raise WeightsError(f"@{func.name}: '{NUM_INPUT}' is {n!r}, not a count of its {len(func.params)} parameters")
    return n


def weight_names(func: Function) -> list[str]:
    """The names of the weights of ``func``: its parameters after the first ``num_input``."""
    return param_names(func)[_num_input(func) :]


def _as_array(name: str, value: Any) -> np.ndarray:
    """An array from numpy, a ``tvm.runtime.Tensor``, or an ``nn.Parameter`` whose data is set."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__name__ == "Parameter" and hasattr(value, "data"):  # tvm.relax.frontend.nn.Parameter
        value = value.data
        if value is None:
            raise WeightsError(f"weight '{name}' is an nn.Parameter without data; set its data or pass an array")
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value)


def _is_named_list(weights: Any) -> bool:
    """``export_tvm``'s ``params``: a list of (name, parameter) pairs."""
    return (
        isinstance(weights, (list, tuple))
        and len(weights) > 0
        and all(isinstance(w, tuple) and len(w) == 2 and isinstance(w[0], str) for w in weights)
    )


def _check(name: str, t: Type, a: np.ndarray) -> None:
    if not isinstance(t, (TensorType, DTensorType)):
        return
    if str(a.dtype) != t.dtype:
        raise WeightsError(f"weight '{name}': expected dtype {t.dtype}, got {a.dtype}")
    static = all(not sym.is_symbolic(d) for d in t.shape)
    if a.ndim != len(t.shape) or (static and tuple(a.shape) != tuple(int(d) for d in t.shape)):
        want = "(" + ", ".join(sym.to_str(d) for d in t.shape) + ")"
        raise WeightsError(f"weight '{name}': expected shape {want}, got {tuple(a.shape)}")


def weight_arguments(
    func: Function, inputs: Sequence[Any], weights: Sequence[Any] | Mapping[str, Any]
) -> list[np.ndarray]:
    """Every argument of ``func``: ``inputs`` (the first ``num_input`` parameters), then the weights.

    ``weights`` is a list of arrays in parameter order, a mapping from weight name to array,
    or ``export_tvm``'s ``params`` (a list of (name, nn.Parameter) pairs with data set); a name missing or unknown, a wrong count, dtype or shape is a
    :class:`WeightsError` naming it. Shapes are checked against the function's global
    signature (recorded by the lowering), so a local-view function takes global weights too.
    """
    n_in = _num_input(func)
    names = param_names(func)
    wnames = names[n_in:]
    types = list(func.attrs.get(GLOBAL_PARAMS, [p.type for p in func.params]))
    inputs = list(inputs)
    if len(inputs) != n_in:
        raise WeightsError(
            f"@{func.name} takes {n_in} input{'s' if n_in != 1 else ''} ({', '.join(names[:n_in]) or 'none'}) "
            f"before its weights, got {len(inputs)}"
        )
    if _is_named_list(weights):
        pairs = list(weights)
        weights = dict(pairs)
        if len(weights) != len(pairs):
            raise WeightsError("weights name one weight twice")
    if isinstance(weights, Mapping):
        known = set(wnames)
        missing = [n for n in wnames if n not in weights]
        extra = [str(k) for k in weights if k not in known]
        if extra:
            close = difflib.get_close_matches(extra[0], wnames, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise WeightsError(
                f"weights name {len(extra)} unknown weight{'s' if len(extra) != 1 else ''} of @{func.name}: "
                f"{_listing(extra)}{hint}"
            )
        if missing:
            raise WeightsError(
                f"weights lack {len(missing)} of the {len(wnames)} weights of @{func.name}: {_listing(missing)}"
            )
        ordered = [weights[n] for n in wnames]
    else:
        ordered = list(weights)
        if len(ordered) != len(wnames):
            raise WeightsError(f"@{func.name} has {len(wnames)} weights, got a list of {len(ordered)}")
    out = [_as_array(n, a) for n, a in zip(names, inputs)]
    for name, t, value in zip(wnames, types[n_in:], ordered):
        a = _as_array(name, value)
        _check(name, t, a)
        out.append(a)
    return out


def _listing(names: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
