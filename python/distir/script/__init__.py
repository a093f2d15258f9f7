"""The text format: a TVMScript-style parser and printer, and the ``I``/``R``/``T`` decorators.

``from distir.script import ir as I, relax as R, tirx as T`` gives the names used in
IR files and in Python test files (``@I.ir_module class Module: ...``).
"""

from .. import ops  # noqa: F401  (declares every op and step kind)
from ..ir.expr import set_printer as _set_printer
from . import ir, relax, tirx
from .parser import parse, parse_file, parse_source
from .printer import print_function, print_module, print_type

_set_printer("module", print_module)
_set_printer("function", print_function)

__all__ = ["ir", "parse", "parse_file", "parse_source", "print_function", "print_module", "print_type", "relax", "tirx"]
