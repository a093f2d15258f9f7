"""Build and run an exported module on TVM's Disco runtime.

:func:`run_pieces` takes what ``tvm.compile`` built from :func:`distir.tvm.to_relax`'s
export (specialized with ``BindSymbolicVars``) and every worker's piece of every input,
starts a Disco ``ThreadedSession`` with the CPU collectives of :mod:`distir.tvm.cpu_ccl`,
scatters the pieces through Disco, calls the function on every worker and returns each
worker's outputs. Cutting global arrays into pieces and reassembling the outputs is the
simulator's (:mod:`distir.runtime.spmd`); :func:`distir.driver.run_disco` joins the two.

An error inside a Disco worker thread aborts the whole process (TVM 0.27 does not catch
it there), so everything that can be checked is checked first, in the caller's thread:
the input shapes and dtypes, and the sizes the module was specialized for (by calling
the module's ``distir_disco_layout`` function on a local VM).
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..ir.types import DTensorType, TensorType, Type
from . import cpu_ccl
from .errors import DiscoRunError
from .export import DISCO_LAYOUT_FUNC, SIZE_PREFIX

__all__ = ["check_dtypes", "default_target", "load_disco", "run_pieces", "shared_library", "specialize_and_build",
           "symbolic_var_names"]

_DISCO = None
_LIBRARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # build -> (its directory, the .so path)
_LIBRARIES_LOCK = threading.Lock()
_UNCACHED: list = []  # directories of builds that cannot be weakly referenced
OPT_LEVEL_ENV = "DISTIR_LLVM_OPT_LEVEL"


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


def default_target() -> tvm.target.Target:
    """The CPU target of distir's builds: LLVM at its default optimization level, or at the level
    the environment variable ``DISTIR_LLVM_OPT_LEVEL`` names (0 builds about 4x faster; the
    test suite sets it, since how well LLVM optimizes the machine code is not distir's to check)."""
    level = os.environ.get(OPT_LEVEL_ENV, "").strip()
    if not level:
        return tvm.target.Target("llvm")
    if level not in ("0", "1", "2", "3"):
        raise DiscoRunError(f"{OPT_LEVEL_ENV}={level!r}: expected an LLVM optimization level, 0 to 3")
    return tvm.target.Target({"kind": "llvm", "opt-level": int(level)})


def specialize_and_build(tvm_mod: tvm.IRModule, values: Mapping[str, int], target=None):
    """``BindSymbolicVars(values)`` then ``tvm.compile``: one device count's build of a symbolic export.

    Only the names the module has are bound: a module whose meshes are static has no
    ``num_workers`` (TVM rejects a binding of a variable the module lacks). ``target``:
    :func:`default_target` unless given."""
    present = symbolic_var_names(tvm_mod)
    used = {k: int(v) for k, v in values.items() if k in present}
    bound = relax.transform.BindSymbolicVars(used)(tvm_mod) if used else tvm_mod
    return tvm.compile(bound, target=default_target() if target is None else target)


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


def check_dtypes(gparams: Sequence[Type], arrays: Sequence[np.ndarray], names: Sequence[str]) -> None:
    """The number and dtypes of the inputs, as the built function will want them."""
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


def run_pieces(
    built,
    func: str,
    n_params: int,
    values: Mapping[str, int],
    pieces_for: Callable[[int], Sequence[Mapping[int, np.ndarray]]],
    stats: dict | None = None,
) -> dict[int, Any]:
    """Run ``built``'s ``func`` on a Disco ThreadedSession; each worker's outputs.

    ``values`` gives the sizes the build takes as parameters; ``pieces_for(total)`` gives,
    per parameter, every worker's array of a session of ``total`` workers (known once the
    build says its layout). Pass a dict as ``stats`` to get the collectives' call counts
    and bytes sent.
    """
    disco = load_disco()
    path = shared_library(built)
    # the local VM reads the shared library (no second code generation); it looks up distir's own
    # functions (distir.ccl.*) as it loads
    cpu_ccl.register()
    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    size_names = _size_params(vm, func, n_params)
    total, groups = _layout(vm, values)
    pieces = pieces_for(total)
    with cpu_ccl.session(total, groups) as state:
        sess = disco.ThreadedSession(total, groups)
        try:
            outputs = _call(sess, state, path, func, size_names, values, pieces, total)
        finally:
            sess.shutdown()
    if stats is not None:
        stats.update(num_workers=total, num_groups=groups, calls=dict(state.calls), bytes_sent=state.bytes_sent)
    return outputs


def shared_library(built) -> str:
    """The path of ``built`` exported as a shared library, which Disco's workers load: written
    once per build (writing it is LLVM's code generation, most of a build's cost), in a
    temporary directory removed with the build."""
    with _LIBRARIES_LOCK:
        try:
            hit = _LIBRARIES.get(built)
        except TypeError:  # not weakly referable: exported each time, kept until the process ends
            hit = None
        if hit is None:
            tmp = tempfile.TemporaryDirectory(prefix="distir-disco-")
            path = os.path.join(tmp.name, "module.so")
            built.export_library(path)
            hit = (tmp, path)
            try:
                _LIBRARIES[built] = hit
            except TypeError:
                _UNCACHED.append(tmp)
        return hit[1]


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
