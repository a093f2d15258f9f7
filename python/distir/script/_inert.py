"""Inert placeholders for the names Python evaluates while a decorated class or def is defined.

A class body runs, and a def's annotations are evaluated, before any decorator sees
them. ``R.Tensor(...)``, ``I.module_global_infos(...)``, ``R.nn.softmax`` and friends must
therefore exist and be harmless: they return an :class:`Inert` that records nothing and
does nothing. The real meaning comes from the parser reading the source text.
"""

from __future__ import annotations

from typing import Any


class Inert:
    """Callable and attribute-able placeholder; every use gives another placeholder."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Inert:
        return Inert(self._name + "(...)")

    def __getattr__(self, name: str) -> Inert:
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert(f"{self._name}.{name}")

    def __repr__(self) -> str:
        return f"<distir.script placeholder {self._name}>"


def inert_getattr(prefix: str):
    """A module-level ``__getattr__`` giving placeholders for public names, never for dunders."""

    def __getattr__(name: str) -> Inert:
        if name.startswith("_"):
            raise AttributeError(f"module {prefix!r} has no attribute {name!r}")
        return Inert(f"{prefix}.{name}")

    return __getattr__


def placeholder(name: str):
    """A named function returning a placeholder (for the explicitly listed names)."""

    def make(*args: Any, **kwargs: Any) -> Inert:
        return Inert(name + "(...)")

    make.__name__ = name.rsplit(".", 1)[-1]
    make.__qualname__ = make.__name__
    return make
