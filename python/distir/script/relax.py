"""``R``: function-level names of the text format (``from distir.script import relax as R``).

``@R.function`` on a top-level def parses it into a distir Function; inside an
``@I.ir_module`` class it leaves the def alone (the class decorator parses everything).
Types (``R.Tensor``, ``R.DTensor`` ...), ``R.device_mesh`` and ops (``R.nn.softmax``) are
placeholders: Python evaluates annotations when a def runs, and they must do nothing.
"""

from __future__ import annotations

from ._decorate import function_from_def, in_class
from ._inert import inert_getattr, placeholder

__all__ = [
    "DTensor",
    "Prim",
    "Shape",
    "Tensor",
    "Tuple",
    "const",
    "dataflow",
    "device_mesh",
    "func_attr",
    "function",
    "output",
    "prim_value",
    "shape",
]


def function(func=None, *, private: bool = False, pure: bool = True):
    """``@R.function`` or ``@R.function(private=True)``."""

    def wrap(f):
        if in_class(f):
            return f
        return function_from_def(f)

    if func is None:
        return wrap
    return wrap(func)


Tensor = placeholder("R.Tensor")
DTensor = placeholder("R.DTensor")
Tuple = placeholder("R.Tuple")
Shape = placeholder("R.Shape")
Prim = placeholder("R.Prim")
device_mesh = placeholder("R.device_mesh")
dataflow = placeholder("R.dataflow")
output = placeholder("R.output")
func_attr = placeholder("R.func_attr")
const = placeholder("R.const")
shape = placeholder("R.shape")
prim_value = placeholder("R.prim_value")

__getattr__ = inert_getattr("R")
