"""Build targets, the devices their builds run on, and whether TVM has NCCL: one line each when not.

``target`` is what ``tvm.compile`` takes: ``"llvm"`` (the CPU, the default), ``"cuda"``, a
tag such as ``"nvidia/nvidia-h100"``, or a JSON-style dict. A target TVM does not know, a
device the machine lacks (a CUDA target without a GPU) and a build that fails are
``TargetError``, one line naming the target.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import tvm
import tvm_ffi

from .errors import TargetError, tvm_message

__all__ = ["DEFAULT_TARGET", "OPT_LEVEL_ENV", "default_target", "describe", "has_nccl", "is_host", "parse_target",
           "run_device"]

DEFAULT_TARGET = "llvm"
OPT_LEVEL_ENV = "DISTIR_LLVM_OPT_LEVEL"
_NCCL_INIT = "runtime.disco.nccl.init_ccl"


def describe(target: Any) -> str:
    return target if isinstance(target, str) else str(target)


def default_target() -> tvm.target.Target:
    """The CPU target of distir's builds: LLVM at its default optimization level, or at the level
    the environment variable ``DISTIR_LLVM_OPT_LEVEL`` names (0 builds about 4x faster; the test
    suite sets it, since how well LLVM optimizes the machine code is not distir's to check)."""
    level = os.environ.get(OPT_LEVEL_ENV, "").strip()
    if not level:
        return tvm.target.Target(DEFAULT_TARGET)
    if level not in ("0", "1", "2", "3"):
        raise TargetError(f"{OPT_LEVEL_ENV}={level!r}: expected an LLVM optimization level, 0 to 3")
    return tvm.target.Target({"kind": "llvm", "opt-level": int(level)})


def parse_target(target: Any) -> tvm.target.Target:
    """TVM's Target for ``target`` (``"llvm"``: :func:`default_target`); a target TVM does not know
    is one line."""
    if isinstance(target, tvm.target.Target):
        return target
    if target == DEFAULT_TARGET:
        return default_target()
    try:
        with _quiet_native_stderr():  # a CUDA target without a GPU logs it; run_device's one line says it better
            return tvm.target.Target(target)
    except Exception as err:  # noqa: BLE001 - TVM raises ValueError or its own errors
        raise TargetError(f"target '{describe(target)}': {tvm_message(err)} (e.g. 'llvm' or 'cuda')") from None


@contextlib.contextmanager
def _quiet_native_stderr():
    """Hide what TVM's C++ side prints meanwhile (a CUDA target on a machine without a GPU logs that it
    cannot detect the CUDA version; the one line that follows says so better)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run_device(target: Any) -> tvm.runtime.Device:
    """The device a build for ``target`` runs on (device 0 of its kind); one line when the machine has none."""
    t = parse_target(target)
    dev = tvm.runtime.Device(int(t.get_target_device_type()), 0)
    if not dev.exist:
        kind = t.kind.name
        raise TargetError(
            f"target '{describe(target)}' runs on {kind} devices, and TVM finds none on this machine"
            + (" (no GPU, or no CUDA driver)" if kind == "cuda" else "")
        )
    return dev


def is_host(device: tvm.runtime.Device) -> bool:
    return int(device.dlpack_device_type()) == 1  # kDLCPU


def has_nccl() -> bool:
    """Whether this TVM build has Disco's NCCL library (``runtime.disco.nccl.init_ccl``), as MLC-LLM's
    builds do; the ``apache-tvm`` 0.27 wheel says USE_NCCL=ON but registers none of it."""
    return tvm_ffi.get_global_func(_NCCL_INIT, allow_missing=True) is not None
