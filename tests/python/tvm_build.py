"""TVM's own one-device build, as the tests compare against it (no distir in between).

Built for the suite's CPU target (``default_target``: LLVM at ``DISTIR_LLVM_OPT_LEVEL``) and loaded
from a shared library, as Disco loads distir's builds: running a fresh in-memory build makes LLVM's
JIT generate the machine code again on the first call, about twice the whole build's time.
"""

from __future__ import annotations

import tvm
from tvm import relax

from distir.tvm.disco import shared_library
from distir.tvm.targets import default_target


def one_device_vm(tvm_mod: tvm.IRModule) -> relax.VirtualMachine:
    """A VM of ``tvm_mod`` built by TVM alone for the CPU."""
    built = tvm.compile(tvm_mod, target=default_target())
    return relax.VirtualMachine(tvm.runtime.load_module(shared_library(built)), tvm.cpu())
