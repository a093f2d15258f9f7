"""What an exported module and the Disco runner agree on, owned by neither.

:func:`distir.tvm.to_relax` writes them into every module it exports; :mod:`distir.tvm.disco`
reads them from a build to check the sizes it was specialized for before any worker runs it.
"""

from __future__ import annotations

__all__ = ["DISCO_LAYOUT_FUNC", "SIZE_PREFIX"]

#: the function ``(size_...) -> R.Shape([workers, groups])``: the Disco session the module needs
DISCO_LAYOUT_FUNC = "distir_disco_layout"
#: each function's parameter for a size variable ``v`` is named ``size_<v>``
SIZE_PREFIX = "size_"
