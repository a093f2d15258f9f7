"""``I``: module-level names of the text format (``from distir.script import ir as I``).

``@I.ir_module`` parses the decorated class's source into a distir IRModule. The other
names only have to exist while the class body runs; they do nothing.
"""

from __future__ import annotations

from ._decorate import module_from_class
from ._inert import inert_getattr, placeholder

__all__ = ["Range", "ir_module", "module_attrs", "module_global_infos"]


def ir_module(cls):
    """Parse the class's source (not its runtime contents) into an IRModule."""
    if not isinstance(cls, type):
        raise TypeError("@I.ir_module decorates a class")
    return module_from_class(cls)


module_attrs = placeholder("I.module_attrs")
module_global_infos = placeholder("I.module_global_infos")
Range = placeholder("I.Range")

__getattr__ = inert_getattr("I")
