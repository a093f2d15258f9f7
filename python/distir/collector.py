"""Python's cyclic garbage collector paused around work that allocates many small acyclic objects.

Passes, the parser and the printer build and drop thousands of small nodes, almost all acyclic
or garbage at the end, and keep what they remember (the layers of a model repeat the same
calls): each full collection walked all of it again, a quarter of the distribute pipeline's time
on an 80-layer stack. Pausing is nested safely: the collector is left as it was found."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def collector_paused():
    """The cyclic collector off for the ``with`` block, then back as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
