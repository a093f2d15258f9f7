"""Build and run an exported module on TVM's Disco runtime.

:func:`run_disco` takes what ``tvm.compile`` built from :func:`distir.tvm.to_relax`'s
export (specialized with ``BindSymbolicVars``), the distir local-view module that was
exported (its recorded global signature says how to cut the inputs), and global arrays.
It cuts the inputs into each worker's piece, starts a Disco ``ThreadedSession`` with the
CPU collectives of :mod:`distir.tvm.cpu_ccl`, scatters the pieces through Disco, calls
the function on every worker and reassembles the outputs.

An error inside a Disco worker thread aborts the whole process (TVM 0.27 does not catch
it there), so everything that can be checked is checked first, in the caller's thread:
the input shapes and dtypes, and the sizes the module was specialized for (by calling
the module's ``distir_disco_layout`` function on a local VM).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..ir import sym
from ..ir.expr import IRModule
from ..ir.layout import local_shape
from ..ir.types import DTensorType, TensorType, Type
from . import cpu_ccl
from .errors import DiscoRunError
from .export import DISCO_LAYOUT_FUNC, SIZE_PREFIX

__all__ = ["load_disco", "run_disco", "specialize_and_build", "symbolic_var_names"]

_DISCO = None


def load_disco():
    """``tvm.runtime.disco``, loaded despite the 0.27 wheel's import order (docs/tvm.md).

    ``import tvm`` imports ``tvm.runtime.disco`` before it loads ``libtvm_runtime_extra``
    (where Disco's C++ functions live), so the import fails and ``tvm.runtime.disco`` is
    None. Filling the FFI table again and importing the package once more fixes it.
    """
    global _DISCO
    if _DISCO is not None:
        return _DISCO
    mod = getattr(tvm.runtime, "disco", None)
    if mod is None or not hasattr(getattr(mod, "_ffi_api", None), "SessionThreaded"):
        if tvm_ffi.get_global_func("runtime.disco.SessionThreaded", allow_missing=True) is None:
            raise DiscoRunError("this TVM build has no Disco runtime (libtvm_runtime_extra is missing)")
        tvm_ffi.init_ffi_api("runtime.disco", "tvm.runtime.disco._ffi_api")
        mod = importlib.import_module("tvm.runtime.disco")
        tvm.runtime.disco = mod
    _DISCO = mod
    return mod


def symbolic_var_names(tvm_mod: tvm.IRModule) -> set[str]:
    """Names of the symbolic shape variables of a Relax module's functions (what BindSymbolicVars can bind)."""
    names: set[str] = set()
    for func in tvm_mod.functions.values():
        if isinstance(func, relax.Function):
            for v in (*relax.analysis.defined_symbolic_vars(func), *relax.analysis.free_symbolic_vars(func)):
                names.add(str(v.name))
    return names


def specialize_and_build(tvm_mod: tvm.IRModule, values: Mapping[str, int], target: str = "llvm"):
    """``BindSymbolicVars(values)`` then ``tvm.compile``: one device count's build of a symbolic export.

    Only the names the module has are bound: a module whose meshes are static has no
    ``num_workers`` (TVM rejects a binding of a variable the module lacks)."""
    present = symbolic_var_names(tvm_mod)
    used = {k: int(v) for k, v in values.items() if k in present}
    bound = relax.transform.BindSymbolicVars(used)(tvm_mod) if used else tvm_mod
    return tvm.compile(bound, target=target)


# ---------------------------------------------------------------- checks in the caller's thread


def _size_params(vm, func: str, n_tensors: int) -> list[str]:
    try:
        arity = vm._get_function_arity(func)
    except Exception:  # noqa: BLE001 - TVM raises several error types
        raise DiscoRunError(f"the built module has no function '{func}'") from None
    names = [vm._get_function_param_name(func, i) for i in range(arity)]
    sizes = arity - n_tensors
    if sizes < 0 or not all(n.startswith(SIZE_PREFIX) for n in names[:sizes]):
        raise DiscoRunError(
            f"the built function '{func}' takes parameters {names}, which do not fit the distir function's "
            f"{n_tensors} parameters; pass the module that was exported"
        )
    return [n[len(SIZE_PREFIX) :] for n in names[:sizes]]


def _size_value(name: str, values: Mapping[str, int]) -> int:
    if name not in values:
        raise DiscoRunError(f"no value for the size '{name}' (known: {', '.join(sorted(values)) or 'none'})")
    return int(values[name])


def _layout(vm, values: Mapping[str, int]) -> tuple[int, int]:
    """(workers, groups) the built module needs; fails here if it was built for other sizes."""
    names = _size_params(vm, DISCO_LAYOUT_FUNC, 0)
    args = [tvm.runtime.ShapeTuple([_size_value(n, values)]) for n in names]
    try:
        out = vm[DISCO_LAYOUT_FUNC](*args)
    except Exception as err:  # noqa: BLE001 - TVM raises several error types
        given = ", ".join(f"{n}={values[n]}" for n in names)
        last = [ln for ln in str(err).splitlines() if ln.strip()][-1:]
        raise DiscoRunError(
            f"the built module was specialized for other sizes than {given} ({last[0] if last else err})"
        ) from None
    return int(out[0]), int(out[1])


def _check_inputs(gparams: Sequence[Type], arrays: Sequence[np.ndarray], names: Sequence[str]) -> None:
    if len(arrays) != len(gparams):
        raise DiscoRunError(f"the function takes {len(gparams)} inputs ({', '.join(names)}), got {len(arrays)}")
    for name, t, a in zip(names, gparams, arrays):
        if isinstance(t, (TensorType, DTensorType)) and str(a.dtype) != t.dtype:
            raise DiscoRunError(f"input '{name}': expected dtype {t.dtype}, got {a.dtype}")


# ---------------------------------------------------------------- the run


def _to_numpy(value: Any):
    if isinstance(value, tvm.runtime.Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)) or type(value).__name__ == "Array":
        return tuple(_to_numpy(v) for v in value)
    return value


def run_disco(
    built,
    local_mod: IRModule,
    *global_arrays: np.ndarray,
    num_workers: int,
    func: str = "main",
    symbol: str = "num_workers",
    seed: int = 0,
    stats: dict | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
):
    """Run ``built`` on a Disco ThreadedSession; return the global outputs (module docstring).

    ``local_mod`` is the local-view module that was exported (symbolic or specialized);
    ``num_workers`` is the value of ``symbol``. Pass a dict as ``stats`` to get the
    collectives' call counts and bytes sent.
    """
    from ..runtime.interpreter import bind_params
    from ..runtime.spmd import SpmdError, assemble_output
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT
    from ..transform.specialize import check_divisible

    disco = load_disco()
    if func not in local_mod.functions:
        raise DiscoRunError(f"the module has no function '{func}' (it has: {', '.join(local_mod.functions)})")
    f = local_mod.functions[func]
    gparams = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
    gresult = f.attrs.get(GLOBAL_RESULT, f.result.type)
    arrays = [np.asarray(a) for a in global_arrays]
    _check_inputs(gparams, arrays, [p.name for p in f.params])
    try:
        arrays, values = bind_params(f, arrays, {symbol: int(num_workers)}, types=gparams)
    except Exception as err:  # noqa: BLE001 - RunError and symbolic errors, reported the same way
        raise DiscoRunError(str(err)) from None
    check_divisible(local_mod, values, "inputs with")  # the export asserts it too, but inside a worker thread

    with tempfile.TemporaryDirectory(prefix="distir-disco-") as tmp:
        path = os.path.join(tmp, "module.so")
        built.export_library(path)
        # the local VM reads the shared library just written (no second code generation)
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
        size_names = _size_params(vm, func, len(f.params))
        total, groups = _layout(vm, values)
        pieces = _input_pieces(f, gparams, arrays, values, total, seed)
        with cpu_ccl.session(total, groups) as state:
            sess = disco.ThreadedSession(total, groups)
            try:
                outputs = _call(sess, state, path, func, size_names, values, pieces, total)
            finally:
                sess.shutdown()
    if stats is not None:
        stats.update(num_workers=total, num_groups=groups, calls=dict(state.calls), bytes_sent=state.bytes_sent)
    try:
        return assemble_output(gresult.substitute(values), outputs, values, f"the result of @{func}", rtol, atol)
    except SpmdError as err:
        raise DiscoRunError(str(err)) from None


def _input_pieces(f, gparams, arrays, values, total: int, seed: int) -> list[dict[int, np.ndarray]]:
    """Each input cut into every worker's piece by the global signature (zeros outside its mesh)."""
    from ..runtime.spmd import shard_input

    rng = np.random.default_rng(seed)
    pieces: list[dict[int, np.ndarray]] = []
    for p, t, a in zip(f.params, gparams, arrays):
        if isinstance(t, DTensorType):
            want = tuple(sym.evaluate(d, values) for d in local_shape(t.shape, t.mesh, t.placement))
            per = shard_input(t, a, values, rng)
            for w in range(total):  # a worker outside the mesh still runs the program: give it zeros
                per.setdefault(w, np.zeros(want, dtype=a.dtype))
        else:
            per = {w: a for w in range(total)}
            want = a.shape
        if any(per[w].shape != want for w in range(total)):
            raise DiscoRunError(f"input '{p.name}': pieces do not have the local shape {want}")
        pieces.append(per)
    return pieces


def _call(sess, state, path: str, func: str, size_names, values, pieces, total: int) -> dict[int, Any]:
    dmod = sess.load_vm_module(path)
    make_shape = sess.get_global_func("ffi.Shape")
    args = [make_shape(_size_value(n, values)) for n in size_names]
    for per in pieces:
        first = per[0]
        stacked = np.ascontiguousarray(np.stack([per[w] for w in range(total)]))
        dst = sess.empty(first.shape, str(first.dtype))
        src = sess.copy_to_worker_0(tvm.runtime.tensor(stacked))
        sess.scatter_from_worker0(src, dst, in_group=False)
        args.append(dst)
    for w in range(total):  # inputs in place: count only the function's own collectives from here
        sess._sync_worker(w)
    state.calls.clear()
    state.bytes_sent = 0
    result = dmod[func](*args)
    return {w: _to_numpy(result.debug_get_from_remote(w)) for w in range(total)}
